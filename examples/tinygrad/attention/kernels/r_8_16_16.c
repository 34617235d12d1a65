/* exported from tinygrad: entry r_8_16_16 */
#if defined(__clang__)
typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));
#else
typedef float float4 __attribute__((aligned(16),vector_size(4*sizeof(float))));
#endif
void r_8_16_16(float* restrict data0_128, float* restrict data1_128, float* restrict data2_8, float* restrict data3_8, float* restrict data4_256) {
  for (int Lidx1 = 0; Lidx1 < 8; Lidx1++) {
    float val0 = (*(data2_8+Lidx1));
    float val1 = (*(data3_8+Lidx1));
    int alu0 = (Lidx1<<4);
    float4 val2 = (*((float4*)((data1_128+(alu0+4)))));
    float4 val3 = (*((float4*)((data1_128+(alu0+8)))));
    float4 val4 = (*((float4*)((data1_128+(alu0+12)))));
    float4 val5 = (*((float4*)((data1_128+alu0))));
    for (int Lidx2 = 0; Lidx2 < 16; Lidx2++) {
      float val6 = (*(data4_256+(Lidx2+16)));
      float val7 = (*(data4_256+(Lidx2+32)));
      float val8 = (*(data4_256+(Lidx2+48)));
      float val9 = (*(data4_256+(Lidx2+64)));
      float val10 = (*(data4_256+(Lidx2+80)));
      float val11 = (*(data4_256+(Lidx2+96)));
      float val12 = (*(data4_256+(Lidx2+112)));
      float val13 = (*(data4_256+(Lidx2+128)));
      float val14 = (*(data4_256+(Lidx2+144)));
      float val15 = (*(data4_256+(Lidx2+160)));
      float val16 = (*(data4_256+(Lidx2+176)));
      float val17 = (*(data4_256+(Lidx2+192)));
      float val18 = (*(data4_256+(Lidx2+208)));
      float val19 = (*(data4_256+(Lidx2+224)));
      float val20 = (*(data4_256+(Lidx2+240)));
      float val21 = (*(data4_256+Lidx2));
      *(data0_128+(alu0+Lidx2)) = ((((val5[0]-val0)*val21)+((val5[1]-val0)*val6)+((val5[2]-val0)*val7)+((val5[3]-val0)*val8)+((val2[0]-val0)*val9)+((val2[1]-val0)*val10)+((val2[2]-val0)*val11)+((val2[3]-val0)*val12)+((val3[0]-val0)*val13)+((val3[1]-val0)*val14)+((val3[2]-val0)*val15)+((val3[3]-val0)*val16)+((val4[0]-val0)*val17)+((val4[1]-val0)*val18)+((val4[2]-val0)*val19)+((val4[3]-val0)*val20))/val1);
    }
  }
}

