/* exported from tinygrad: entry E_batch_10 */
#if !defined(__clang__)
#define __builtin_bit_cast(T, v) ({ __typeof__(v) svod_v_ = (v); T svod_t_; __builtin_memcpy(&svod_t_, &svod_v_, sizeof(svod_t_)); svod_t_; })
#endif

void E_batch_10(float* restrict data0_160, float* restrict data1_160, float* restrict data2_16, float* restrict data3_16, const int data4_) {
  for (int Lidx0 = 0; Lidx0 < data4_; Lidx0++) {
    float val0 = (*(data2_16+Lidx0));
    float val1 = (*(data3_16+Lidx0));
    for (int Lidx1 = 0; Lidx1 < 10; Lidx1++) {
      int alu0 = ((Lidx0*10)+Lidx1);
      float val2 = (*(data1_160+alu0));
      float alu1 = ((val2-val0)*1.4426950216293335f);
      _Bool alu2 = (alu1!=alu1);
      float alu3 = ((alu1!=((float)(-__builtin_inff())))?alu1:0.0f);
      float alu4 = (alu2?0.0f:alu3);
      float alu5 = ((alu1!=((float)(__builtin_inff())))?alu4:0.0f);
      float alu6 = ((alu5<0.0f)?-0.5f:0.5f);
      int cast0 = ((int)((alu5+alu6)));
      int alu7 = (cast0>>1);
      float alu8 = (alu5-((float)(cast0)));
      float alu9 = (((alu1<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu8)+0.0013392627006396651f)*alu8)+0.009618384763598442f)*alu8)+0.055503472685813904f)*alu8)+0.24022644758224487f)*alu8)+0.6931471824645996f)*alu8)+1.0f)*__builtin_bit_cast(float, (int)(((alu7+127)<<23)))*__builtin_bit_cast(float, (int)((((cast0-alu7)+127)<<23)))));
      float alu10 = ((alu1<-150.0f)?0.0f:alu9);
      float alu11 = (alu2?((float)(__builtin_nanf(""))):alu10);
      *(data0_160+alu0) = (alu11/val1);
    }
  }
}

