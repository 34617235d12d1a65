/* exported from tinygrad: entry r_batch_32_32 */
#if !defined(__clang__)
#define __builtin_bit_cast(T, v) ({ __typeof__(v) svod_v_ = (v); T svod_t_; __builtin_memcpy(&svod_t_, &svod_v_, sizeof(svod_t_)); svod_t_; })
#endif
#if defined(__clang__)
typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));
#else
typedef float float4 __attribute__((aligned(16),vector_size(4*sizeof(float))));
#endif
void r_batch_32_32(float* restrict data0_512, float* restrict data1_512, float* restrict data2_1024, const int data3_) {
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
    for (int Lidx2 = 0; Lidx2 < 32; Lidx2++) {
      float val8 = (*(data2_1024+(Lidx2+32)));
      float val9 = (*(data2_1024+(Lidx2+64)));
      float val10 = (*(data2_1024+(Lidx2+96)));
      float val11 = (*(data2_1024+(Lidx2+128)));
      float val12 = (*(data2_1024+(Lidx2+160)));
      float val13 = (*(data2_1024+(Lidx2+192)));
      float val14 = (*(data2_1024+(Lidx2+224)));
      float val15 = (*(data2_1024+(Lidx2+256)));
      float val16 = (*(data2_1024+(Lidx2+288)));
      float val17 = (*(data2_1024+(Lidx2+320)));
      float val18 = (*(data2_1024+(Lidx2+352)));
      float val19 = (*(data2_1024+(Lidx2+384)));
      float val20 = (*(data2_1024+(Lidx2+416)));
      float val21 = (*(data2_1024+(Lidx2+448)));
      float val22 = (*(data2_1024+(Lidx2+480)));
      float val23 = (*(data2_1024+(Lidx2+512)));
      float val24 = (*(data2_1024+(Lidx2+544)));
      float val25 = (*(data2_1024+(Lidx2+576)));
      float val26 = (*(data2_1024+(Lidx2+608)));
      float val27 = (*(data2_1024+(Lidx2+640)));
      float val28 = (*(data2_1024+(Lidx2+672)));
      float val29 = (*(data2_1024+(Lidx2+704)));
      float val30 = (*(data2_1024+(Lidx2+736)));
      float val31 = (*(data2_1024+(Lidx2+768)));
      float val32 = (*(data2_1024+(Lidx2+800)));
      float val33 = (*(data2_1024+(Lidx2+832)));
      float val34 = (*(data2_1024+(Lidx2+864)));
      float val35 = (*(data2_1024+(Lidx2+896)));
      float val36 = (*(data2_1024+(Lidx2+928)));
      float val37 = (*(data2_1024+(Lidx2+960)));
      float val38 = (*(data2_1024+(Lidx2+992)));
      float val39 = (*(data2_1024+Lidx2));
      float alu1 = ((val7[0]*val39)+(val7[1]*val8)+(val7[2]*val9)+(val7[3]*val10)+(val0[0]*val11)+(val0[1]*val12)+(val0[2]*val13)+(val0[3]*val14)+(val1[0]*val15)+(val1[1]*val16)+(val1[2]*val17)+(val1[3]*val18)+(val2[0]*val19)+(val2[1]*val20)+(val2[2]*val21)+(val2[3]*val22)+(val3[0]*val23)+(val3[1]*val24)+(val3[2]*val25)+(val3[3]*val26)+(val4[0]*val27)+(val4[1]*val28)+(val4[2]*val29)+(val4[3]*val30)+(val5[0]*val31)+(val5[1]*val32)+(val5[2]*val33)+(val5[3]*val34)+(val6[0]*val35)+(val6[1]*val36)+(val6[2]*val37)+(val6[3]*val38));
      float alu2 = ((alu1+(0.044714998453855515f*alu1*alu1*alu1))*-2.302208185195923f);
      _Bool alu3 = (alu2!=alu2);
      float alu4 = ((alu2!=((float)(-__builtin_inff())))?alu2:0.0f);
      float alu5 = (alu3?0.0f:alu4);
      float alu6 = ((alu2!=((float)(__builtin_inff())))?alu5:0.0f);
      float alu7 = ((alu6<0.0f)?-0.5f:0.5f);
      int cast0 = ((int)((alu6+alu7)));
      int alu8 = (cast0>>1);
      float alu9 = (alu6-((float)(cast0)));
      float alu10 = (((alu2<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu9)+0.0013392627006396651f)*alu9)+0.009618384763598442f)*alu9)+0.055503472685813904f)*alu9)+0.24022644758224487f)*alu9)+0.6931471824645996f)*alu9)+1.0f)*__builtin_bit_cast(float, (int)(((alu8+127)<<23)))*__builtin_bit_cast(float, (int)((((cast0-alu8)+127)<<23)))));
      float alu11 = ((alu2<-150.0f)?0.0f:alu10);
      float alu12 = (alu3?((float)(__builtin_nanf(""))):alu11);
      *(data0_512+(alu0+Lidx2)) = (alu1/(1.0f+alu12));
    }
  }
}

