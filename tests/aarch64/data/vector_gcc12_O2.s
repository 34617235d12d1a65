// GENERATED: gcc 12 (Debian bookworm arm64) -O2 -fPIC -fno-asynchronous-unwind-tables -S of
// tests/loader_cases.py VECTOR_SOURCE; assembled on any host by aarch64-linux-gnu-as.
	.arch armv8-a
	.file	"vector_case.c"
	.text
	.align	2
	.p2align 4,,11
	.type	mix, %function
mix:
.LFB0:
	.cfi_startproc
	mov	w2, 19923
	mov	w1, 6641
	movk	w2, 0x1062, lsl 16
	movk	w1, 0x576, lsl 16
	mov	w6, 2000
	mov	w5, 1500
	umull	x2, w0, w2
	adrp	x4, coef
	umull	x1, w0, w1
	add	x4, x4, :lo12:coef
	adrp	x3, wts
	add	x3, x3, :lo12:wts
	lsr	x2, x2, 39
	lsr	x1, x1, 37
	msub	w2, w2, w6, w0
	msub	w0, w1, w5, w0
	ldr	s2, [x4, w2, sxtw 2]
	ldr	s1, [x3, w0, sxtw 2]
	fmadd	s0, s2, s0, s1
	ret
	.cfi_endproc
.LFE0:
	.size	mix, .-mix
	.align	2
	.p2align 4,,11
	.global	vec_kernel
	.type	vec_kernel, %function
vec_kernel:
.LFB1:
	.cfi_startproc
	stp	x29, x30, [sp, -96]!
	.cfi_def_cfa_offset 96
	.cfi_offset 29, -96
	.cfi_offset 30, -88
	mov	x29, sp
	stp	x21, x22, [sp, 32]
	.cfi_offset 21, -64
	.cfi_offset 22, -56
	lsl	w22, w1, 2
	add	w2, w22, w1
	stp	x19, x20, [sp, 16]
	.cfi_offset 19, -80
	.cfi_offset 20, -72
	adrp	x19, big
	lsl	w2, w2, 3
	stp	x23, x24, [sp, 48]
	.cfi_offset 23, -48
	.cfi_offset 24, -40
	add	x24, x19, :lo12:big
	mov	w21, w1
	sbfiz	x2, x2, 2, 32
	mov	w1, 0
	adrp	x20, vacc
	stp	x25, x26, [sp, 64]
	.cfi_offset 25, -32
	.cfi_offset 26, -24
	mov	x26, x0
	add	x25, x20, :lo12:vacc
	mov	x0, x24
	bl	memset
	sbfiz	x2, x22, 4, 32
	mov	x0, x25
	mov	w1, 0
	bl	memset
	cmp	w21, 3
	ble	.L10
	adrp	x0, .LC0
	sub	w10, w21, #4
	and	w10, w10, -4
	mov	w21, 33205
	ldr	q0, [x0, #:lo12:.LC0]
	adrp	x0, .LC1
	mov	w15, 6641
	mov	w13, 34079
	ldr	q4, [x0, #:lo12:.LC1]
	adrp	x0, .LC2
	adrp	x7, .LANCHOR0
	adrp	x11, .LANCHOR1
	ldr	q3, [x0, #:lo12:.LC2]
	adrp	x0, .LC3
	add	w10, w10, 4
	add	x11, x11, :lo12:.LANCHOR1
	ldr	q16, [x0, #:lo12:.LC3]
	adrp	x0, .LC4
	mov	w22, 0
	mov	w23, 0
	ldr	q7, [x0, #:lo12:.LC4]
	adrp	x0, .LC5
	mov	w9, 0
	mov	w8, 0
	ldr	q6, [x0, #:lo12:.LC5]
	adrp	x0, .LC6
	movk	w21, 0x1b4e, lsl 16
	mov	w18, 300
	ldr	q5, [x0, #:lo12:.LC6]
	movk	w15, 0x576, lsl 16
	mov	w14, 3000
	movk	w13, 0x51eb, lsl 16
	mov	w12, 100
	str	x27, [sp, 80]
	.cfi_offset 27, -16
	add	x27, x7, :lo12:.LANCHOR0
	b	.L6
	.p2align 2,,3
.L5:
	ldr	q0, [x11, x2]
.L6:
	umull	x1, w9, w21
	mov	v1.16b, v6.16b
	mov	w0, w23
	ldr	q2, [x26], 16
	lsr	x1, x1, 37
	add	w23, w23, 68
	mla	v1.4s, v4.4s, v7.4s
	msub	w1, w1, w18, w9
	add	w9, w9, 28
	mov	v4.16b, v1.16b
	sbfiz	x1, x1, 4, 32
	mov	v1.16b, v16.16b
	fmla	v1.4s, v3.4s, v2.4s
	fadd	v3.4s, v1.4s, v0.4s
	ldr	q1, [x25, x1]
	dup	s19, v3.s[1]
	fmla	v1.4s, v3.4s, v5.4s
	dup	s18, v3.s[2]
	fmov	s0, s19
	str	q1, [x25, x1]
	bl	mix
	umull	x1, w22, w15
	umull	x0, w8, w13
	lsr	x1, x1, 38
	lsr	x0, x0, 37
	msub	w1, w1, w14, w22
	add	w22, w22, 524
	msub	w0, w0, w12, w8
	add	w8, w8, 4
	sxtw	x1, w1
	ubfiz	x2, x8, 4, 3
	sxtw	x0, w0
	ldr	s2, [x24, x1, lsl 2]
	ldr	s1, [x27, x0, lsl 2]
	fadd	s2, s2, s0
	fadd	s1, s1, s18
	str	s2, [x24, x1, lsl 2]
	str	s1, [x27, x0, lsl 2]
	cmp	w8, w10
	bne	.L5
	fmov	w0, s4
	fmov	s0, s3
	ldr	x27, [sp, 80]
	.cfi_restore 27
	dup	s16, v3.s[3]
	and	w0, w0, 65535
	scvtf	s17, w0
.L4:
	movi	v2.2s, #0
	mov	w4, 60495
	add	x2, x19, :lo12:big
	mov	x1, 0
	movk	w4, 0x4ec4, lsl 16
	mov	w3, 13
	.p2align 3,,7
.L7:
	umull	x0, w1, w4
	ldr	s3, [x2, x1, lsl 2]
	lsr	x0, x0, 34
	msub	w0, w0, w3, w1
	add	x1, x1, 1
	add	w0, w0, 1
	scvtf	s1, w0
	fmadd	s2, s3, s1, s2
	cmp	x1, 3000
	bne	.L7
	add	x20, x20, :lo12:vacc
	mov	x0, 4800
	add	x0, x20, x0
	.p2align 3,,7
.L8:
	ld4	{v4.4s - v7.4s}, [x20], 64
	fsub	v1.4s, v4.4s, v5.4s
	fmla	v1.4s, v6.4s, v7.4s
	dup	s4, v1.s[1]
	fadd	s2, s2, s1
	dup	s3, v1.s[2]
	dup	s1, v1.s[3]
	fadd	s2, s4, s2
	fadd	s2, s3, s2
	fadd	s2, s2, s1
	cmp	x20, x0
	bne	.L8
	add	x0, x7, :lo12:.LANCHOR0
	add	x1, x0, 400
	.p2align 3,,7
.L9:
	ldr	s1, [x0], 4
	fadd	s2, s2, s1
	cmp	x0, x1
	bne	.L9
	fadd	s0, s2, s0
	ldp	x19, x20, [sp, 16]
	ldp	x21, x22, [sp, 32]
	fadd	s0, s0, s19
	ldp	x23, x24, [sp, 48]
	ldp	x25, x26, [sp, 64]
	fadd	s0, s0, s18
	ldp	x29, x30, [sp], 96
	.cfi_remember_state
	.cfi_restore 30
	.cfi_restore 29
	.cfi_restore 25
	.cfi_restore 26
	.cfi_restore 23
	.cfi_restore 24
	.cfi_restore 21
	.cfi_restore 22
	.cfi_restore 19
	.cfi_restore 20
	.cfi_def_cfa_offset 0
	fadd	s0, s0, s16
	fadd	s0, s0, s17
	ret
.L10:
	.cfi_restore_state
	fmov	s17, 1.0e+0
	fmov	s16, 7.5e-1
	fmov	s18, 3.125e+0
	fmov	s19, -2.25e+0
	fmov	s0, 1.5e+0
	adrp	x7, .LANCHOR0
	b	.L4
	.cfi_endproc
.LFE1:
	.size	vec_kernel, .-vec_kernel
	.section	.rodata.cst16,"aM",@progbits,16
	.align	4
.LC0:
	.word	1065353216
	.word	1073741824
	.word	1077936128
	.word	1082130432
	.align	4
.LC1:
	.word	1
	.word	2
	.word	3
	.word	4
	.align	4
.LC2:
	.word	1069547520
	.word	-1072693248
	.word	1078460416
	.word	1061158912
	.align	4
.LC3:
	.word	1056964608
	.word	1048576000
	.word	1040187392
	.word	1031798784
	.align	4
.LC4:
	.word	3
	.word	5
	.word	7
	.word	9
	.align	4
.LC5:
	.word	1
	.word	1
	.word	2
	.word	2
	.align	4
.LC6:
	.word	1065353216
	.word	-1082130432
	.word	1073741824
	.word	-1073741824
	.section	.rodata
	.align	4
	.set	.LANCHOR1,. + 0
	.type	kv, %object
	.size	kv, 128
kv:
	.word	1065353216
	.word	1073741824
	.word	1077936128
	.word	1082130432
	.word	1084227584
	.word	1086324736
	.word	1088421888
	.word	1090519040
	.word	1091567616
	.word	1092616192
	.word	1093664768
	.word	1094713344
	.word	1095761920
	.word	1096810496
	.word	1097859072
	.word	1098907648
	.zero	64
	.type	coef, %object
	.size	coef, 8000
coef:
	.word	1056964608
	.word	1048576000
	.word	1040187392
	.word	1073741824
	.word	1077936128
	.word	1082130432
	.word	1084227584
	.word	1086324736
	.zero	7964
	.word	1091567616
	.type	wts, %object
	.size	wts, 6000
wts:
	.word	1065353216
	.word	1073741824
	.word	1077936128
	.word	1082130432
	.word	1084227584
	.word	1086324736
	.word	1088421888
	.word	1090519040
	.zero	5968
	.bss
	.align	4
	.set	.LANCHOR0,. + 0
	.type	tail_arr, %object
	.size	tail_arr, 400
tail_arr:
	.zero	400
	.type	vacc, %object
	.size	vacc, 4800
vacc:
	.zero	4800
	.type	big, %object
	.size	big, 12000
big:
	.zero	12000
	.ident	"GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"
	.section	.note.GNU-stack,"",@progbits
