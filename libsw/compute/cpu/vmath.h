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

#endif
