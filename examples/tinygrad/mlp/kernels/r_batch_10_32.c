/* exported from tinygrad: entry r_batch_10_32 */
#if defined(__clang__)
typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));
#else
typedef float float4 __attribute__((aligned(16),vector_size(4*sizeof(float))));
#endif
void r_batch_10_32(float* restrict data0_160, float* restrict data1_512, float* restrict data2_320, const int data3_) {
  for (int Lidx1 = 0; Lidx1 < data3_; Lidx1++) {
    int alu0 = (Lidx1<<5);
    float4 val0 = (*((float4*)((data1_512+(alu0+4)))));
    float4 val1 = (*((float4*)((data1_512+(alu0+8)))));
    float4 val2 = (*((float4*)((data1_512+(alu0+12)))));
    float4 val3 = (*((float4*)((data1_512+(alu0+16)))));
    float4 val4 = (*((float4*)((data1_512+(alu0+20)))));
    float4 val5 = (*((float4*)((data1_512+(alu0+24)))));
    float4 val6 = (*((float4*)((data1_512+(alu0+28)))));
    float4 val7 = (*((float4*)((data1_512+alu0))));
    for (int Lidx2 = 0; Lidx2 < 10; Lidx2++) {
      float val8 = (*(data2_320+(Lidx2+10)));
      float val9 = (*(data2_320+(Lidx2+20)));
      float val10 = (*(data2_320+(Lidx2+30)));
      float val11 = (*(data2_320+(Lidx2+40)));
      float val12 = (*(data2_320+(Lidx2+50)));
      float val13 = (*(data2_320+(Lidx2+60)));
      float val14 = (*(data2_320+(Lidx2+70)));
      float val15 = (*(data2_320+(Lidx2+80)));
      float val16 = (*(data2_320+(Lidx2+90)));
      float val17 = (*(data2_320+(Lidx2+100)));
      float val18 = (*(data2_320+(Lidx2+110)));
      float val19 = (*(data2_320+(Lidx2+120)));
      float val20 = (*(data2_320+(Lidx2+130)));
      float val21 = (*(data2_320+(Lidx2+140)));
      float val22 = (*(data2_320+(Lidx2+150)));
      float val23 = (*(data2_320+(Lidx2+160)));
      float val24 = (*(data2_320+(Lidx2+170)));
      float val25 = (*(data2_320+(Lidx2+180)));
      float val26 = (*(data2_320+(Lidx2+190)));
      float val27 = (*(data2_320+(Lidx2+200)));
      float val28 = (*(data2_320+(Lidx2+210)));
      float val29 = (*(data2_320+(Lidx2+220)));
      float val30 = (*(data2_320+(Lidx2+230)));
      float val31 = (*(data2_320+(Lidx2+240)));
      float val32 = (*(data2_320+(Lidx2+250)));
      float val33 = (*(data2_320+(Lidx2+260)));
      float val34 = (*(data2_320+(Lidx2+270)));
      float val35 = (*(data2_320+(Lidx2+280)));
      float val36 = (*(data2_320+(Lidx2+290)));
      float val37 = (*(data2_320+(Lidx2+300)));
      float val38 = (*(data2_320+(Lidx2+310)));
      float val39 = (*(data2_320+Lidx2));
      *(data0_160+((Lidx1*10)+Lidx2)) = ((val7[0]*val39)+(val7[1]*val8)+(val7[2]*val9)+(val7[3]*val10)+(val0[0]*val11)+(val0[1]*val12)+(val0[2]*val13)+(val0[3]*val14)+(val1[0]*val15)+(val1[1]*val16)+(val1[2]*val17)+(val1[3]*val18)+(val2[0]*val19)+(val2[1]*val20)+(val2[2]*val21)+(val2[3]*val22)+(val3[0]*val23)+(val3[1]*val24)+(val3[2]*val25)+(val3[3]*val26)+(val4[0]*val27)+(val4[1]*val28)+(val4[2]*val29)+(val4[3]*val30)+(val5[0]*val31)+(val5[1]*val32)+(val5[2]*val33)+(val5[3]*val34)+(val6[0]*val35)+(val6[1]*val36)+(val6[2]*val37)+(val6[3]*val38));
    }
  }
}

