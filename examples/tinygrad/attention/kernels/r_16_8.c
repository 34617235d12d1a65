/* exported from tinygrad: entry r_16_8 */
#if defined(__clang__)
typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));
#else
typedef float float4 __attribute__((aligned(16),vector_size(4*sizeof(float))));
#endif
void r_16_8(float* restrict data0_16, float* restrict data1_128) {
  for (int Lidx1 = 0; Lidx1 < 16; Lidx1++) {
    int alu0 = (Lidx1<<3);
    float4 val0 = (*((float4*)((data1_128+(alu0+4)))));
    float4 val1 = (*((float4*)((data1_128+alu0))));
    float alu1 = ((val1[0]<val1[1])?val1[1]:val1[0]);
    float alu2 = ((alu1<val1[2])?val1[2]:alu1);
    float alu3 = ((alu2<val1[3])?val1[3]:alu2);
    float alu4 = ((alu3<val0[0])?val0[0]:alu3);
    float alu5 = ((alu4<val0[1])?val0[1]:alu4);
    float alu6 = ((alu5<val0[2])?val0[2]:alu5);
    float alu7 = ((alu6<val0[3])?val0[3]:alu6);
    *(data0_16+Lidx1) = alu7;
  }
}

