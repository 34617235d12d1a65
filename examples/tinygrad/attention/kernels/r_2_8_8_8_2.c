/* exported from tinygrad: entry r_2_8_8_8 */
#if !defined(__clang__)
#define __builtin_bit_cast(T, v) ({ __typeof__(v) svod_v_ = (v); T svod_t_; __builtin_memcpy(&svod_t_, &svod_v_, sizeof(svod_t_)); svod_t_; })
#endif
#if defined(__clang__)
typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));
#else
typedef float float4 __attribute__((aligned(16),vector_size(4*sizeof(float))));
#endif
void r_2_8_8_8(float* restrict data0_128, float* restrict data1_128, float* restrict data2_16, float* restrict data3_16, float* restrict data4_128) {
  for (int Lidx1 = 0; Lidx1 < 2; Lidx1++) {
    int alu0 = (Lidx1<<3);
    int alu1 = (Lidx1<<6);
    for (int Lidx2 = 0; Lidx2 < 8; Lidx2++) {
      int alu2 = (alu0+Lidx2);
      float val0 = (*(data2_16+alu2));
      float val1 = (*(data3_16+alu2));
      int alu3 = (Lidx2<<3);
      int alu4 = (alu1+alu3);
      float4 val2 = (*((float4*)((data1_128+(alu4+4)))));
      float4 val3 = (*((float4*)((data1_128+alu4))));
      float alu5 = ((val2[0]-val0)*1.4426950216293335f);
      _Bool alu6 = (alu5!=alu5);
      float alu7 = ((alu5!=((float)(-__builtin_inff())))?alu5:0.0f);
      float alu8 = (alu6?0.0f:alu7);
      float alu9 = ((alu5!=((float)(__builtin_inff())))?alu8:0.0f);
      float alu10 = ((alu9<0.0f)?-0.5f:0.5f);
      int cast0 = ((int)((alu9+alu10)));
      float alu11 = ((val2[1]-val0)*1.4426950216293335f);
      _Bool alu12 = (alu11!=alu11);
      float alu13 = ((alu11!=((float)(-__builtin_inff())))?alu11:0.0f);
      float alu14 = (alu12?0.0f:alu13);
      float alu15 = ((alu11!=((float)(__builtin_inff())))?alu14:0.0f);
      float alu16 = ((alu15<0.0f)?-0.5f:0.5f);
      int cast1 = ((int)((alu15+alu16)));
      float alu17 = ((val2[2]-val0)*1.4426950216293335f);
      _Bool alu18 = (alu17!=alu17);
      float alu19 = ((alu17!=((float)(-__builtin_inff())))?alu17:0.0f);
      float alu20 = (alu18?0.0f:alu19);
      float alu21 = ((alu17!=((float)(__builtin_inff())))?alu20:0.0f);
      float alu22 = ((alu21<0.0f)?-0.5f:0.5f);
      int cast2 = ((int)((alu21+alu22)));
      float alu23 = ((val2[3]-val0)*1.4426950216293335f);
      _Bool alu24 = (alu23!=alu23);
      float alu25 = ((alu23!=((float)(-__builtin_inff())))?alu23:0.0f);
      float alu26 = (alu24?0.0f:alu25);
      float alu27 = ((alu23!=((float)(__builtin_inff())))?alu26:0.0f);
      float alu28 = ((alu27<0.0f)?-0.5f:0.5f);
      int cast3 = ((int)((alu27+alu28)));
      float alu29 = ((val3[0]-val0)*1.4426950216293335f);
      _Bool alu30 = (alu29!=alu29);
      float alu31 = ((alu29!=((float)(-__builtin_inff())))?alu29:0.0f);
      float alu32 = (alu30?0.0f:alu31);
      float alu33 = ((alu29!=((float)(__builtin_inff())))?alu32:0.0f);
      float alu34 = ((alu33<0.0f)?-0.5f:0.5f);
      int cast4 = ((int)((alu33+alu34)));
      float alu35 = ((val3[1]-val0)*1.4426950216293335f);
      _Bool alu36 = (alu35!=alu35);
      float alu37 = ((alu35!=((float)(-__builtin_inff())))?alu35:0.0f);
      float alu38 = (alu36?0.0f:alu37);
      float alu39 = ((alu35!=((float)(__builtin_inff())))?alu38:0.0f);
      float alu40 = ((alu39<0.0f)?-0.5f:0.5f);
      int cast5 = ((int)((alu39+alu40)));
      float alu41 = ((val3[2]-val0)*1.4426950216293335f);
      _Bool alu42 = (alu41!=alu41);
      float alu43 = ((alu41!=((float)(-__builtin_inff())))?alu41:0.0f);
      float alu44 = (alu42?0.0f:alu43);
      float alu45 = ((alu41!=((float)(__builtin_inff())))?alu44:0.0f);
      float alu46 = ((alu45<0.0f)?-0.5f:0.5f);
      int cast6 = ((int)((alu45+alu46)));
      float alu47 = ((val3[3]-val0)*1.4426950216293335f);
      _Bool alu48 = (alu47!=alu47);
      float alu49 = ((alu47!=((float)(-__builtin_inff())))?alu47:0.0f);
      float alu50 = (alu48?0.0f:alu49);
      float alu51 = ((alu47!=((float)(__builtin_inff())))?alu50:0.0f);
      float alu52 = ((alu51<0.0f)?-0.5f:0.5f);
      int cast7 = ((int)((alu51+alu52)));
      int alu53 = (cast0>>1);
      int alu54 = (cast1>>1);
      int alu55 = (cast2>>1);
      int alu56 = (cast3>>1);
      int alu57 = (cast4>>1);
      int alu58 = (cast5>>1);
      int alu59 = (cast6>>1);
      int alu60 = (cast7>>1);
      float alu61 = (alu9-((float)(cast0)));
      float alu62 = (alu15-((float)(cast1)));
      float alu63 = (alu21-((float)(cast2)));
      float alu64 = (alu27-((float)(cast3)));
      float alu65 = (alu33-((float)(cast4)));
      float alu66 = (alu39-((float)(cast5)));
      float alu67 = (alu45-((float)(cast6)));
      float alu68 = (alu51-((float)(cast7)));
      float alu69 = (((alu5<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu61)+0.0013392627006396651f)*alu61)+0.009618384763598442f)*alu61)+0.055503472685813904f)*alu61)+0.24022644758224487f)*alu61)+0.6931471824645996f)*alu61)+1.0f)*__builtin_bit_cast(float, (int)(((alu53+127)<<23)))*__builtin_bit_cast(float, (int)((((cast0-alu53)+127)<<23)))));
      float alu70 = ((alu5<-150.0f)?0.0f:alu69);
      float alu71 = (((alu11<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu62)+0.0013392627006396651f)*alu62)+0.009618384763598442f)*alu62)+0.055503472685813904f)*alu62)+0.24022644758224487f)*alu62)+0.6931471824645996f)*alu62)+1.0f)*__builtin_bit_cast(float, (int)(((alu54+127)<<23)))*__builtin_bit_cast(float, (int)((((cast1-alu54)+127)<<23)))));
      float alu72 = ((alu11<-150.0f)?0.0f:alu71);
      float alu73 = (((alu17<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu63)+0.0013392627006396651f)*alu63)+0.009618384763598442f)*alu63)+0.055503472685813904f)*alu63)+0.24022644758224487f)*alu63)+0.6931471824645996f)*alu63)+1.0f)*__builtin_bit_cast(float, (int)(((alu55+127)<<23)))*__builtin_bit_cast(float, (int)((((cast2-alu55)+127)<<23)))));
      float alu74 = ((alu17<-150.0f)?0.0f:alu73);
      float alu75 = (((alu23<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu64)+0.0013392627006396651f)*alu64)+0.009618384763598442f)*alu64)+0.055503472685813904f)*alu64)+0.24022644758224487f)*alu64)+0.6931471824645996f)*alu64)+1.0f)*__builtin_bit_cast(float, (int)(((alu56+127)<<23)))*__builtin_bit_cast(float, (int)((((cast3-alu56)+127)<<23)))));
      float alu76 = ((alu23<-150.0f)?0.0f:alu75);
      float alu77 = (((alu29<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu65)+0.0013392627006396651f)*alu65)+0.009618384763598442f)*alu65)+0.055503472685813904f)*alu65)+0.24022644758224487f)*alu65)+0.6931471824645996f)*alu65)+1.0f)*__builtin_bit_cast(float, (int)(((alu57+127)<<23)))*__builtin_bit_cast(float, (int)((((cast4-alu57)+127)<<23)))));
      float alu78 = ((alu29<-150.0f)?0.0f:alu77);
      float alu79 = (((alu35<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu66)+0.0013392627006396651f)*alu66)+0.009618384763598442f)*alu66)+0.055503472685813904f)*alu66)+0.24022644758224487f)*alu66)+0.6931471824645996f)*alu66)+1.0f)*__builtin_bit_cast(float, (int)(((alu58+127)<<23)))*__builtin_bit_cast(float, (int)((((cast5-alu58)+127)<<23)))));
      float alu80 = ((alu35<-150.0f)?0.0f:alu79);
      float alu81 = (((alu41<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu67)+0.0013392627006396651f)*alu67)+0.009618384763598442f)*alu67)+0.055503472685813904f)*alu67)+0.24022644758224487f)*alu67)+0.6931471824645996f)*alu67)+1.0f)*__builtin_bit_cast(float, (int)(((alu59+127)<<23)))*__builtin_bit_cast(float, (int)((((cast6-alu59)+127)<<23)))));
      float alu82 = ((alu41<-150.0f)?0.0f:alu81);
      float alu83 = (((alu47<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu68)+0.0013392627006396651f)*alu68)+0.009618384763598442f)*alu68)+0.055503472685813904f)*alu68)+0.24022644758224487f)*alu68)+0.6931471824645996f)*alu68)+1.0f)*__builtin_bit_cast(float, (int)(((alu60+127)<<23)))*__builtin_bit_cast(float, (int)((((cast7-alu60)+127)<<23)))));
      float alu84 = ((alu47<-150.0f)?0.0f:alu83);
      float alu85 = (alu6?((float)(__builtin_nanf(""))):alu70);
      float alu86 = (alu12?((float)(__builtin_nanf(""))):alu72);
      float alu87 = (alu18?((float)(__builtin_nanf(""))):alu74);
      float alu88 = (alu24?((float)(__builtin_nanf(""))):alu76);
      float alu89 = (alu30?((float)(__builtin_nanf(""))):alu78);
      float alu90 = (alu36?((float)(__builtin_nanf(""))):alu80);
      float alu91 = (alu42?((float)(__builtin_nanf(""))):alu82);
      float alu92 = (alu48?((float)(__builtin_nanf(""))):alu84);
      for (int Lidx3 = 0; Lidx3 < 8; Lidx3++) {
        int alu93 = (alu0+Lidx3);
        float val4 = (*(data4_128+(alu93+16)));
        float val5 = (*(data4_128+(alu93+32)));
        float val6 = (*(data4_128+(alu93+48)));
        float val7 = (*(data4_128+(alu93+64)));
        float val8 = (*(data4_128+(alu93+80)));
        float val9 = (*(data4_128+(alu93+96)));
        float val10 = (*(data4_128+(alu93+112)));
        float val11 = (*(data4_128+alu93));
        *(data0_128+(alu3+Lidx3+alu1)) = (((alu89*val11)+(alu90*val4)+(alu91*val5)+(alu92*val6)+(alu85*val7)+(alu86*val8)+(alu87*val9)+(alu88*val10))/val1);
      }
    }
  }
}

