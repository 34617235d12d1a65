/* exported from tinygrad: entry r_2_4_8 */
#if defined(__clang__)
typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));
#else
typedef float float4 __attribute__((aligned(16),vector_size(4*sizeof(float))));
#endif
void r_2_4_8(float* restrict data0_8, float* restrict data1_16, float* restrict data2_32) {
  for (int Lidx1 = 0; Lidx1 < 2; Lidx1++) {
    int alu0 = (Lidx1<<3);
    float4 val0 = (*((float4*)((data1_16+(alu0+4)))));
    float4 val1 = (*((float4*)((data1_16+alu0))));
    for (int Lidx2 = 0; Lidx2 < 4; Lidx2++) {
      float val2 = (*(data2_32+(Lidx2+4)));
      float val3 = (*(data2_32+(Lidx2+8)));
      float val4 = (*(data2_32+(Lidx2+12)));
      float val5 = (*(data2_32+(Lidx2+16)));
      float val6 = (*(data2_32+(Lidx2+20)));
      float val7 = (*(data2_32+(Lidx2+24)));
      float val8 = (*(data2_32+(Lidx2+28)));
      float val9 = (*(data2_32+Lidx2));
      *(data0_8+((Lidx1<<2)+Lidx2)) = ((val1[0]*val9)+(val1[1]*val2)+(val1[2]*val3)+(val1[3]*val4)+(val0[0]*val5)+(val0[1]*val6)+(val0[2]*val7)+(val0[3]*val8));
    }
  }
}

