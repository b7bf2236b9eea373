/*
 * backend.c - the backends by name (sw/backend.h): the one place a program's
 * --device word becomes a backend.
 */
#include <string.h>
#include "common/internal.h"
#include "compute/backend.h"

const sw_backend *sw_backend_get(const char *name, sw_error *err)
{
	/* Both compute with the CPU's ops: a bad $SW_GEMM fails them here. */
	if (!name || !*name || !strcmp(name, "cpu"))
		return sw_backend_cpu()->sync(err) ? NULL : sw_backend_cpu();
	if (!strcmp(name, "guard"))
		return sw_backend_cpu()->sync(err) ? NULL : sw_backend_guard();
	sw_fail(err, SW_EINVAL, "unknown device '%s' (known: cpu, guard)", name);
	return NULL;
}

const char *sw_backend_name(const sw_backend *be)
{
	return be ? be->name : "cpu";
}

int sw_act_code(const char *name)
{
	static const struct { const char *name; int code; } map[] = {
		{ "gelu", SW_ACT_GELU }, { "gelu_pytorch_tanh", SW_ACT_GELU_TANH },
		{ "quick_gelu", SW_ACT_QUICK_GELU }, { "silu", SW_ACT_SILU },
	};
	for (size_t i = 0; name && i < sizeof map / sizeof *map; i++)
		if (!strcmp(name, map[i].name))
			return map[i].code;
	return -1;
}
