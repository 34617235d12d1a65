/* exported from tinygrad: entry r_16_8 */
#if !defined(__clang__)
#define __builtin_bit_cast(T, v) ({ __typeof__(v) svod_v_ = (v); T svod_t_; __builtin_memcpy(&svod_t_, &svod_v_, sizeof(svod_t_)); svod_t_; })
#endif
#if defined(__clang__)
typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));
#else
typedef float float4 __attribute__((aligned(16),vector_size(4*sizeof(float))));
#endif
void r_16_8(float* restrict data0_16, float* restrict data1_128, float* restrict data2_16) {
  for (int Lidx1 = 0; Lidx1 < 16; Lidx1++) {
    float val0 = (*(data2_16+Lidx1));
    int alu0 = (Lidx1<<3);
    float4 val1 = (*((float4*)((data1_128+(alu0+4)))));
    float4 val2 = (*((float4*)((data1_128+alu0))));
    float alu1 = ((val1[0]-val0)*1.4426950216293335f);
    _Bool alu2 = (alu1!=alu1);
    float alu3 = ((alu1!=((float)(-__builtin_inff())))?alu1:0.0f);
    float alu4 = (alu2?0.0f:alu3);
    float alu5 = ((alu1!=((float)(__builtin_inff())))?alu4:0.0f);
    float alu6 = ((alu5<0.0f)?-0.5f:0.5f);
    int cast0 = ((int)((alu5+alu6)));
    float alu7 = ((val1[1]-val0)*1.4426950216293335f);
    _Bool alu8 = (alu7!=alu7);
    float alu9 = ((alu7!=((float)(-__builtin_inff())))?alu7:0.0f);
    float alu10 = (alu8?0.0f:alu9);
    float alu11 = ((alu7!=((float)(__builtin_inff())))?alu10:0.0f);
    float alu12 = ((alu11<0.0f)?-0.5f:0.5f);
    int cast1 = ((int)((alu11+alu12)));
    float alu13 = ((val1[2]-val0)*1.4426950216293335f);
    _Bool alu14 = (alu13!=alu13);
    float alu15 = ((alu13!=((float)(-__builtin_inff())))?alu13:0.0f);
    float alu16 = (alu14?0.0f:alu15);
    float alu17 = ((alu13!=((float)(__builtin_inff())))?alu16:0.0f);
    float alu18 = ((alu17<0.0f)?-0.5f:0.5f);
    int cast2 = ((int)((alu17+alu18)));
    float alu19 = ((val1[3]-val0)*1.4426950216293335f);
    _Bool alu20 = (alu19!=alu19);
    float alu21 = ((alu19!=((float)(-__builtin_inff())))?alu19:0.0f);
    float alu22 = (alu20?0.0f:alu21);
    float alu23 = ((alu19!=((float)(__builtin_inff())))?alu22:0.0f);
    float alu24 = ((alu23<0.0f)?-0.5f:0.5f);
    int cast3 = ((int)((alu23+alu24)));
    float alu25 = ((val2[0]-val0)*1.4426950216293335f);
    _Bool alu26 = (alu25!=alu25);
    float alu27 = ((alu25!=((float)(-__builtin_inff())))?alu25:0.0f);
    float alu28 = (alu26?0.0f:alu27);
    float alu29 = ((alu25!=((float)(__builtin_inff())))?alu28:0.0f);
    float alu30 = ((alu29<0.0f)?-0.5f:0.5f);
    int cast4 = ((int)((alu29+alu30)));
    float alu31 = ((val2[1]-val0)*1.4426950216293335f);
    _Bool alu32 = (alu31!=alu31);
    float alu33 = ((alu31!=((float)(-__builtin_inff())))?alu31:0.0f);
    float alu34 = (alu32?0.0f:alu33);
    float alu35 = ((alu31!=((float)(__builtin_inff())))?alu34:0.0f);
    float alu36 = ((alu35<0.0f)?-0.5f:0.5f);
    int cast5 = ((int)((alu35+alu36)));
    float alu37 = ((val2[2]-val0)*1.4426950216293335f);
    _Bool alu38 = (alu37!=alu37);
    float alu39 = ((alu37!=((float)(-__builtin_inff())))?alu37:0.0f);
    float alu40 = (alu38?0.0f:alu39);
    float alu41 = ((alu37!=((float)(__builtin_inff())))?alu40:0.0f);
    float alu42 = ((alu41<0.0f)?-0.5f:0.5f);
    int cast6 = ((int)((alu41+alu42)));
    float alu43 = ((val2[3]-val0)*1.4426950216293335f);
    _Bool alu44 = (alu43!=alu43);
    float alu45 = ((alu43!=((float)(-__builtin_inff())))?alu43:0.0f);
    float alu46 = (alu44?0.0f:alu45);
    float alu47 = ((alu43!=((float)(__builtin_inff())))?alu46:0.0f);
    float alu48 = ((alu47<0.0f)?-0.5f:0.5f);
    int cast7 = ((int)((alu47+alu48)));
    int alu49 = (cast0>>1);
    int alu50 = (cast1>>1);
    int alu51 = (cast2>>1);
    int alu52 = (cast3>>1);
    int alu53 = (cast4>>1);
    int alu54 = (cast5>>1);
    int alu55 = (cast6>>1);
    int alu56 = (cast7>>1);
    float alu57 = (alu29-((float)(cast4)));
    float alu58 = (alu35-((float)(cast5)));
    float alu59 = (alu41-((float)(cast6)));
    float alu60 = (((alu25<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu57)+0.0013392627006396651f)*alu57)+0.009618384763598442f)*alu57)+0.055503472685813904f)*alu57)+0.24022644758224487f)*alu57)+0.6931471824645996f)*alu57)+1.0f)*__builtin_bit_cast(float, (int)(((alu53+127)<<23)))*__builtin_bit_cast(float, (int)((((cast4-alu53)+127)<<23)))));
    float alu61 = ((alu25<-150.0f)?0.0f:alu60);
    float alu62 = (((alu31<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu58)+0.0013392627006396651f)*alu58)+0.009618384763598442f)*alu58)+0.055503472685813904f)*alu58)+0.24022644758224487f)*alu58)+0.6931471824645996f)*alu58)+1.0f)*__builtin_bit_cast(float, (int)(((alu54+127)<<23)))*__builtin_bit_cast(float, (int)((((cast5-alu54)+127)<<23)))));
    float alu63 = ((alu31<-150.0f)?0.0f:alu62);
    float alu64 = (alu26?((float)(__builtin_nanf(""))):alu61);
    float alu65 = (alu32?((float)(__builtin_nanf(""))):alu63);
    float alu66 = (((alu37<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu59)+0.0013392627006396651f)*alu59)+0.009618384763598442f)*alu59)+0.055503472685813904f)*alu59)+0.24022644758224487f)*alu59)+0.6931471824645996f)*alu59)+1.0f)*__builtin_bit_cast(float, (int)(((alu55+127)<<23)))*__builtin_bit_cast(float, (int)((((cast6-alu55)+127)<<23)))));
    float alu67 = ((alu37<-150.0f)?0.0f:alu66);
    float alu68 = (alu38?((float)(__builtin_nanf(""))):alu67);
    float alu69 = (alu47-((float)(cast7)));
    float alu70 = (((alu43<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu69)+0.0013392627006396651f)*alu69)+0.009618384763598442f)*alu69)+0.055503472685813904f)*alu69)+0.24022644758224487f)*alu69)+0.6931471824645996f)*alu69)+1.0f)*__builtin_bit_cast(float, (int)(((alu56+127)<<23)))*__builtin_bit_cast(float, (int)((((cast7-alu56)+127)<<23)))));
    float alu71 = ((alu43<-150.0f)?0.0f:alu70);
    float alu72 = (alu44?((float)(__builtin_nanf(""))):alu71);
    float alu73 = (alu5-((float)(cast0)));
    float alu74 = (((alu1<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu73)+0.0013392627006396651f)*alu73)+0.009618384763598442f)*alu73)+0.055503472685813904f)*alu73)+0.24022644758224487f)*alu73)+0.6931471824645996f)*alu73)+1.0f)*__builtin_bit_cast(float, (int)(((alu49+127)<<23)))*__builtin_bit_cast(float, (int)((((cast0-alu49)+127)<<23)))));
    float alu75 = ((alu1<-150.0f)?0.0f:alu74);
    float alu76 = (alu2?((float)(__builtin_nanf(""))):alu75);
    float alu77 = (alu11-((float)(cast1)));
    float alu78 = (((alu7<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu77)+0.0013392627006396651f)*alu77)+0.009618384763598442f)*alu77)+0.055503472685813904f)*alu77)+0.24022644758224487f)*alu77)+0.6931471824645996f)*alu77)+1.0f)*__builtin_bit_cast(float, (int)(((alu50+127)<<23)))*__builtin_bit_cast(float, (int)((((cast1-alu50)+127)<<23)))));
    float alu79 = ((alu7<-150.0f)?0.0f:alu78);
    float alu80 = (alu8?((float)(__builtin_nanf(""))):alu79);
    float alu81 = (alu17-((float)(cast2)));
    float alu82 = (((alu13<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu81)+0.0013392627006396651f)*alu81)+0.009618384763598442f)*alu81)+0.055503472685813904f)*alu81)+0.24022644758224487f)*alu81)+0.6931471824645996f)*alu81)+1.0f)*__builtin_bit_cast(float, (int)(((alu51+127)<<23)))*__builtin_bit_cast(float, (int)((((cast2-alu51)+127)<<23)))));
    float alu83 = ((alu13<-150.0f)?0.0f:alu82);
    float alu84 = (alu14?((float)(__builtin_nanf(""))):alu83);
    float alu85 = (alu23-((float)(cast3)));
    float alu86 = (((alu19<128.0f)!=1)?((float)(__builtin_inff())):(((((((((((((0.00015359208919107914f*alu85)+0.0013392627006396651f)*alu85)+0.009618384763598442f)*alu85)+0.055503472685813904f)*alu85)+0.24022644758224487f)*alu85)+0.6931471824645996f)*alu85)+1.0f)*__builtin_bit_cast(float, (int)(((alu52+127)<<23)))*__builtin_bit_cast(float, (int)((((cast3-alu52)+127)<<23)))));
    float alu87 = ((alu19<-150.0f)?0.0f:alu86);
    float alu88 = (alu20?((float)(__builtin_nanf(""))):alu87);
    *(data0_16+Lidx1) = (alu64+alu65+alu68+alu72+alu76+alu80+alu84+alu88);
  }
}

