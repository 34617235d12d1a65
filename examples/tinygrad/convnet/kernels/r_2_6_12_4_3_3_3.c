/* exported from tinygrad: entry r_2_6_12_4_3_3_3 */

void r_2_6_12_4_3_3_3(float* restrict data0_1728, float* restrict data1_288, float* restrict data2_54) {
  for (int Lidx2 = 0; Lidx2 < 2; Lidx2++) {
    for (int Lidx3 = 0; Lidx3 < 6; Lidx3++) {
      int alu0 = (Lidx3*9);
      float val0 = (*(data2_54+(alu0+1)));
      float val1 = (*(data2_54+(alu0+2)));
      float val2 = (*(data2_54+(alu0+3)));
      float val3 = (*(data2_54+(alu0+4)));
      float val4 = (*(data2_54+(alu0+5)));
      float val5 = (*(data2_54+(alu0+6)));
      float val6 = (*(data2_54+(alu0+7)));
      float val7 = (*(data2_54+(alu0+8)));
      float val8 = (*(data2_54+alu0));
      for (int Lidx4 = 0; Lidx4 < 12; Lidx4++) {
        _Bool alu1 = (0<Lidx4);
        _Bool alu2 = (Lidx4<11);
        for (int Lidx5 = 0; Lidx5 < 4; Lidx5++) {
          int alu3 = ((Lidx4*12)+(Lidx5*3));
          int alu4 = (alu3+(Lidx2*144));
          _Bool alu5 = (0<Lidx5);
          float val9 = ((alu5&alu1)?*(data1_288+(alu4+-13)):0.0f);
          float val10 = (alu1?*(data1_288+(alu4+-12)):0.0f);
          float val11 = (alu1?*(data1_288+(alu4+-11)):0.0f);
          float val12 = (alu1?*(data1_288+(alu4+-10)):0.0f);
          _Bool alu6 = (Lidx5<3);
          float val13 = ((alu6&alu1)?*(data1_288+(alu4+-9)):0.0f);
          float val14 = (alu5?*(data1_288+(alu4+-1)):0.0f);
          float val15 = (*(data1_288+(alu4+1)));
          float val16 = (*(data1_288+(alu4+2)));
          float val17 = (alu6?*(data1_288+(alu4+3)):0.0f);
          float val18 = ((alu5&alu2)?*(data1_288+(alu4+11)):0.0f);
          float val19 = (alu2?*(data1_288+(alu4+12)):0.0f);
          float val20 = (alu2?*(data1_288+(alu4+13)):0.0f);
          float val21 = (alu2?*(data1_288+(alu4+14)):0.0f);
          float val22 = ((alu6&alu2)?*(data1_288+(alu4+15)):0.0f);
          float val23 = (*(data1_288+alu4));
          int alu7 = (alu3+(Lidx3*144)+(Lidx2*864));
          float alu8 = ((val9*val8)+(val10*val0)+(val11*val1)+(val14*val2)+(val23*val3)+(val15*val4)+(val18*val5)+(val19*val6)+(val20*val7));
          float alu9 = ((val10*val8)+(val11*val0)+(val12*val1)+(val23*val2)+(val15*val3)+(val16*val4)+(val19*val5)+(val20*val6)+(val21*val7));
          float alu10 = ((val11*val8)+(val12*val0)+(val13*val1)+(val15*val2)+(val16*val3)+(val17*val4)+(val20*val5)+(val21*val6)+(val22*val7));
          float alu11 = ((0.0f<alu8)?alu8:0.0f);
          float alu12 = ((0.0f<alu9)?alu9:0.0f);
          float alu13 = ((0.0f<alu10)?alu10:0.0f);
          *(data0_1728+(alu7+1)) = alu12;
          *(data0_1728+(alu7+2)) = alu13;
          *(data0_1728+alu7) = alu11;
        }
      }
    }
  }
}

