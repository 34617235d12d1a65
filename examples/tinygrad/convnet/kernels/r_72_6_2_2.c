/* exported from tinygrad: entry r_72_6_2_2 */
#if defined(__clang__)
typedef float float2 __attribute__((aligned(8),ext_vector_type(2)));
#else
typedef float float2 __attribute__((aligned(8),vector_size(2*sizeof(float))));
#endif
void r_72_6_2_2(float* restrict data0_432, float* restrict data1_1728) {
  for (int Lidx2 = 0; Lidx2 < 72; Lidx2++) {
    for (int Lidx5 = 0; Lidx5 < 6; Lidx5++) {
      int alu0 = ((Lidx2*24)+(Lidx5<<1));
      float2 val0 = (*((float2*)((data1_1728+(alu0+12)))));
      float2 val1 = (*((float2*)((data1_1728+alu0))));
      float alu1 = ((val1[0]<val1[1])?val1[1]:val1[0]);
      float alu2 = ((alu1<val0[0])?val0[0]:alu1);
      float alu3 = ((alu2<val0[1])?val0[1]:alu2);
      *(data0_432+((Lidx2*6)+Lidx5)) = alu3;
    }
  }
}

