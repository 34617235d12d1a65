/* exported from tinygrad: entry r_2_8_8_8 */
#if defined(__clang__)
typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));
#else
typedef float float4 __attribute__((aligned(16),vector_size(4*sizeof(float))));
#endif
void r_2_8_8_8(float* restrict data0_128, float* restrict data1_128, float* restrict data2_128) {
  for (int Lidx1 = 0; Lidx1 < 2; Lidx1++) {
    int alu0 = (Lidx1<<3);
    for (int Lidx2 = 0; Lidx2 < 8; Lidx2++) {
      int alu1 = (alu0+(Lidx2<<4));
      float4 val0 = (*((float4*)((data1_128+(alu1+4)))));
      float4 val1 = (*((float4*)((data1_128+alu1))));
      for (int Lidx3 = 0; Lidx3 < 8; Lidx3++) {
        int alu2 = (alu0+(Lidx3<<4));
        float4 val2 = (*((float4*)((data2_128+(alu2+4)))));
        float4 val3 = (*((float4*)((data2_128+alu2))));
        float alu3 = ((Lidx3<(Lidx2+1))?0.0f:((float)(-__builtin_inff())));
        *(data0_128+((Lidx2<<3)+Lidx3+(Lidx1<<6))) = ((((val1[0]*val3[0])+(val1[1]*val3[1])+(val1[2]*val3[2])+(val1[3]*val3[3])+(val0[0]*val2[0])+(val0[1]*val2[1])+(val0[2]*val2[2])+(val0[3]*val2[3]))*0.3535533845424652f)+alu3);
      }
    }
  }
}

