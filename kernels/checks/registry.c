/*
 * The suite: every check a runner offers, in hello order. To add an op, write
 * checks/<op>.c (the checks) and checks/<op>_host.c / <op>_cuda.c (the glue
 * to the library's entry points), list its checks here and its files in
 * kernels/CMakeLists.txt.
 */
#include "demolib.h"
#include "numwatch_check.h"
#include "runner.h"
#include "softmax.h"

#define NW_XSTR(x) #x
#define NW_STR(x)  NW_XSTR(x)

static const struct nw_check *const all_checks[] = {
    &softmax_fwd_check,
    &softmax_bwd_check,
};

const struct nw_check *const *nw_checks(unsigned *count)
{
	*count = sizeof(all_checks) / sizeof(all_checks[0]);
	return all_checks;
}

const char nw_runner_name[] = "numwatch-kernels gen " NW_STR(NW_GEN_VERSION) " / demolib " DL_VERSION;
