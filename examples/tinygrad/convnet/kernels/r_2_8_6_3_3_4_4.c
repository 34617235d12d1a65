/* exported from tinygrad: entry r_2_8_6_3_3_4_4 */

void r_2_8_6_3_3_4_4(float* restrict data0_16, float* restrict data1_432, float* restrict data2_432) {
  float buf0[4];
  float buf1[1];
  for (int Lidx5 = 0; Lidx5 < 2; Lidx5++) {
    for (int Lidx6 = 0; Lidx6 < 8; Lidx6++) {
      *(buf1+0) = 0.0f;
      for (int Ridx3 = 0; Ridx3 < 4; Ridx3++) {
        *(buf0+0) = 0.0f;
        *(buf0+1) = 0.0f;
        *(buf0+2) = 0.0f;
        *(buf0+3) = 0.0f;
        for (int Ridx0 = 0; Ridx0 < 6; Ridx0++) {
          for (int Ridx1 = 0; Ridx1 < 3; Ridx1++) {
            for (int Ridx2 = 0; Ridx2 < 3; Ridx2++) {
              int alu5 = ((Ridx1*6)+(Ridx3*6)+Ridx2+(Ridx0*36)+(Lidx5*216));
              float val0 = (*(data1_432+(alu5+1)));
              float val1 = (*(data1_432+(alu5+2)));
              float val2 = (*(data1_432+(alu5+3)));
              float val3 = (*(data1_432+alu5));
              float val4 = (*(data2_432+((Ridx1*3)+Ridx2+(Ridx0*9)+(Lidx6*54))));
              *(buf0+0) = ((*(buf0+0))+(val3*val4));
              *(buf0+1) = ((*(buf0+1))+(val0*val4));
              *(buf0+2) = ((*(buf0+2))+(val1*val4));
              *(buf0+3) = ((*(buf0+3))+(val2*val4));
            }
          }
        }
        float val5 = (*(buf0+0));
        float val6 = (*(buf0+1));
        float val7 = (*(buf0+2));
        float val8 = (*(buf0+3));
        float alu13 = ((0.0f<val5)?val5:0.0f);
        float alu14 = ((0.0f<val6)?val6:0.0f);
        float alu15 = ((0.0f<val7)?val7:0.0f);
        float alu16 = ((0.0f<val8)?val8:0.0f);
        *(buf1+0) = ((*(buf1+0))+alu13+alu14+alu15+alu16);
      }
      *(data0_16+((Lidx5<<3)+Lidx6)) = ((*(buf1+0))*0.0625f);
    }
  }
}

