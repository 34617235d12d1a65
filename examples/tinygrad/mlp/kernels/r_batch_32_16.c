/* exported from tinygrad: entry r_batch_32_16 */
#if defined(__clang__)
typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));
#else
typedef float float4 __attribute__((aligned(16),vector_size(4*sizeof(float))));
#endif
void r_batch_32_16(float* restrict data0_512, float* restrict data1_256, float* restrict data2_512, float* restrict data3_32, const int data4_) {
  for (int Lidx1 = 0; Lidx1 < data4_; Lidx1++) {
    int alu0 = (Lidx1<<4);
    float4 val0 = (*((float4*)((data1_256+(alu0+4)))));
    float4 val1 = (*((float4*)((data1_256+(alu0+8)))));
    float4 val2 = (*((float4*)((data1_256+(alu0+12)))));
    float4 val3 = (*((float4*)((data1_256+alu0))));
    for (int Lidx2 = 0; Lidx2 < 32; Lidx2++) {
      float val4 = (*(data2_512+(Lidx2+32)));
      float val5 = (*(data2_512+(Lidx2+64)));
      float val6 = (*(data2_512+(Lidx2+96)));
      float val7 = (*(data2_512+(Lidx2+128)));
      float val8 = (*(data2_512+(Lidx2+160)));
      float val9 = (*(data2_512+(Lidx2+192)));
      float val10 = (*(data2_512+(Lidx2+224)));
      float val11 = (*(data2_512+(Lidx2+256)));
      float val12 = (*(data2_512+(Lidx2+288)));
      float val13 = (*(data2_512+(Lidx2+320)));
      float val14 = (*(data2_512+(Lidx2+352)));
      float val15 = (*(data2_512+(Lidx2+384)));
      float val16 = (*(data2_512+(Lidx2+416)));
      float val17 = (*(data2_512+(Lidx2+448)));
      float val18 = (*(data2_512+(Lidx2+480)));
      float val19 = (*(data2_512+Lidx2));
      float val20 = (*(data3_32+Lidx2));
      float alu1 = ((val3[0]*val19)+(val3[1]*val4)+(val3[2]*val5)+(val3[3]*val6)+(val0[0]*val7)+(val0[1]*val8)+(val0[2]*val9)+(val0[3]*val10)+(val1[0]*val11)+(val1[1]*val12)+(val1[2]*val13)+(val1[3]*val14)+(val2[0]*val15)+(val2[1]*val16)+(val2[2]*val17)+(val2[3]*val18)+val20);
      float alu2 = ((0.0f<alu1)?alu1:0.0f);
      *(data0_512+((Lidx1<<5)+Lidx2)) = alu2;
    }
  }
}

