/* exported from tinygrad: entry r_8_16 */
#if defined(__clang__)
typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));
#else
typedef float float4 __attribute__((aligned(16),vector_size(4*sizeof(float))));
#endif
void r_8_16(float* restrict data0_8, float* restrict data1_128, float* restrict data2_8) {
  for (int Lidx1 = 0; Lidx1 < 8; Lidx1++) {
    float val0 = (*(data2_8+Lidx1));
    int alu0 = (Lidx1<<4);
    float4 val1 = (*((float4*)((data1_128+(alu0+4)))));
    float4 val2 = (*((float4*)((data1_128+(alu0+8)))));
    float4 val3 = (*((float4*)((data1_128+(alu0+12)))));
    float4 val4 = (*((float4*)((data1_128+alu0))));
    float alu1 = (val4[0]-val0);
    float alu2 = (val4[1]-val0);
    float alu3 = (val4[2]-val0);
    float alu4 = (val4[3]-val0);
    float alu5 = (val1[0]-val0);
    float alu6 = (val1[1]-val0);
    float alu7 = (val1[2]-val0);
    float alu8 = (val1[3]-val0);
    float alu9 = (val2[0]-val0);
    float alu10 = (val2[1]-val0);
    float alu11 = (val2[2]-val0);
    float alu12 = (val2[3]-val0);
    float alu13 = (val3[0]-val0);
    float alu14 = (val3[1]-val0);
    float alu15 = (val3[2]-val0);
    float alu16 = (val3[3]-val0);
    *(data0_8+Lidx1) = __builtin_sqrtf(((((alu1*alu1)+(alu2*alu2)+(alu3*alu3)+(alu4*alu4)+(alu5*alu5)+(alu6*alu6)+(alu7*alu7)+(alu8*alu8)+(alu9*alu9)+(alu10*alu10)+(alu11*alu11)+(alu12*alu12)+(alu13*alu13)+(alu14*alu14)+(alu15*alu15)+(alu16*alu16))*0.0625f)+9.999999747378752e-06f));
  }
}

