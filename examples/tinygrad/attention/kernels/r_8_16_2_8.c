/* exported from tinygrad: entry r_8_16_2_8 */
#if defined(__clang__)
typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));
#else
typedef float float4 __attribute__((aligned(16),vector_size(4*sizeof(float))));
#endif
void r_8_16_2_8(float* restrict data0_128, float* restrict data1_128, float* restrict data2_128, float* restrict data3_256) {
  float buf0[1];
  for (int Lidx1 = 0; Lidx1 < 8; Lidx1++) {
    for (int Lidx2 = 0; Lidx2 < 16; Lidx2++) {
      *(buf0+0) = 0.0f;
      for (int Ridx0_0 = 0; Ridx0_0 < 2; Ridx0_0++) {
        int alu1 = ((Ridx0_0<<7)+Lidx2);
        float val0 = (*(data3_256+(alu1+16)));
        float val1 = (*(data3_256+(alu1+32)));
        float val2 = (*(data3_256+(alu1+48)));
        float val3 = (*(data3_256+(alu1+64)));
        float val4 = (*(data3_256+(alu1+80)));
        float val5 = (*(data3_256+(alu1+96)));
        float val6 = (*(data3_256+(alu1+112)));
        float val7 = (*(data3_256+alu1));
        int alu2 = ((Ridx0_0<<6)+(Lidx1<<3));
        float4 val8 = (*((float4*)((data2_128+(alu2+4)))));
        float4 val9 = (*((float4*)((data2_128+alu2))));
        *(buf0+0) = ((*(buf0+0))+(val9[0]*val7)+(val9[1]*val0)+(val9[2]*val1)+(val9[3]*val2)+(val8[0]*val3)+(val8[1]*val4)+(val8[2]*val5)+(val8[3]*val6));
      }
      int alu5 = ((Lidx1<<4)+Lidx2);
      float val10 = (*(data1_128+alu5));
      *(data0_128+alu5) = (val10+(*(buf0+0)));
    }
  }
}

