/*
 * vmath.h - the elementwise arithmetic of the CPU ops in a form the
 * compiler vectorises: exp without a libm call, and a marker for loops
 * compiled once per vector width.
 *
 * Same bits at every width.  libsw is compiled as ISO C (-std=c11), so
 * GCC contracts no a*b+c into a fused multiply-add; every operation here is
 * an IEEE add, multiply, divide, square root or conversion, which SSE,
 * AVX2 and AVX-512 round alike.  So a loop marked SW_VEC gives the same
 * results in each of its clones (reductions keep a fixed number of lanes,
 * whatever the register width, for the same reason).
 */
#ifndef SW_CPU_VMATH_H
#define SW_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* A function compiled for AVX-512, AVX2 and the baseline, picked when the
 * program loads (GCC's function multi-versioning). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define SW_VEC __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SW_VEC
#endif

/*
 * e^x in float, within 2 ulp of the correctly rounded value (Cephes'
 * expf: x = n ln 2 + r, |r| <= ln 2 / 2, a degree-5 polynomial for
 * (e^r - 1 - r) / r^2, then 2^n put in the exponent).  0 below -87.3
 * (where e^x is subnormal), inf above 88.7, NaN for NaN.
 */
static inline float sw_expf(float x)
{
	const float hi = 88.7228394f, lo = -87.3365479f;
	float xc = x > hi ? hi : x < lo ? lo : x;
	/* n = round(x / ln 2) by the float rounding of a large magic number. */
	float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
	float r = xc - n * 0.693359375f;
	r = r - n * -2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	float e = p * (r * r) + r + 1.0f;
	/* n is in [-126, 128]: 2^n by halves, so 128 does not overflow the exponent. */
	int32_t ni = (int32_t)n, h = ni >> 1;
	uint32_t b1 = (uint32_t)(h + 127) << 23, b2 = (uint32_t)(ni - h + 127) << 23;
	float s1, s2;
	memcpy(&s1, &b1, sizeof s1);
	memcpy(&s2, &b2, sizeof s2);
	e = e * s1 * s2;
	e = x < lo ? 0.0f : e;
	e = x > hi ? INFINITY : e;
	return x != x ? x : e;
}

/*
 * e^x in double, within 2 ulp of libm's exp (tests/unit/test_sample.c),
 * by Cephes' exp: x = n ln 2 + r, |r| <= ln 2 / 2, e^r as
 * 1 + 2 r P(r^2) / (Q(r^2) - r P(r^2)), then 2^n put in the exponent by
 * halves, so that a subnormal result is rounded once.  Subnormal results
 * down to -745.13, 0 below, inf above 709.78, NaN for NaN.  For loops over
 * a vocabulary (the sampler's), where libm's exp is a call per element.
 */
static inline double sw_exp(double x)
{
	const double hi = 709.782712893384, lo = -745.1332191019412;
	double xc = x > hi ? hi : x < lo ? lo : x;
	/* n = round(x / ln 2) by the double rounding of 1.5 * 2^52; its bits
	 * less that constant's are n as an integer. */
	const double shift = 6755399441055744.0;
	double k = xc * 1.4426950408889634 + shift, n = k - shift;
	double r = xc - n * 6.93145751953125e-1;
	r = r - n * 1.42860682030941723212e-6;
	double rr = r * r;
	double p = ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr +
	            9.99999999999999999910e-1) * r;
	double q = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr +
	            2.27265548208155028766e-1) * rr + 2.00000000000000000009e0;
	double e = 1.0 + 2.0 * (p / (q - p));
	uint64_t kb, sb;
	memcpy(&kb, &k, sizeof kb);
	memcpy(&sb, &shift, sizeof sb);
	/* n is in [-1075, 1024]: 2^n as two normal factors */
	int64_t ni = (int64_t)(kb - sb), h = ni >> 1;
	uint64_t b1 = (uint64_t)(h + 1023) << 52, b2 = (uint64_t)(ni - h + 1023) << 52;
	double s1, s2;
	memcpy(&s1, &b1, sizeof s1);
	memcpy(&s2, &b2, sizeof s2);
	e = e * s1 * s2;
	e = x < lo ? 0.0 : e;
	e = x > hi ? INFINITY : e;
	return x != x ? x : e;
}

#endif
