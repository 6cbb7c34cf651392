/*
 * The suite: every check a runner offers, in hello order. To add an op, write
 * checks/<op>.c (the checks) and checks/<op>_host.c / <op>_cuda.c (the glue
 * to the library's entry points), list its checks here and its files in
 * kernels/CMakeLists.txt.
 *
 * The suite stays the same across the watched library's history, while the
 * library grows: an op the library announces (DL_HAS_<OP> in demolib.h) is
 * offered, one it does not have is left out of hello, so that older commits
 * still build and run the checks they can.
 */
#include "attention.h"
#include "demolib.h"
#include "layernorm.h"
#include "msda.h"
#include "numwatch_check.h"
#include "runner.h"
#include "softmax.h"

#define NW_XSTR(x) #x
#define NW_STR(x)  NW_XSTR(x)

static const struct nw_check *const all_checks[] = {
    &softmax_fwd_check,   &softmax_bwd_check,
#ifdef DL_HAS_LAYERNORM
    &layernorm_fwd_check, &layernorm_bwd_check,
#endif
#ifdef DL_HAS_MSDA
    &msda_fwd_check,      &msda_bwd_check,
#endif
#ifdef DL_HAS_ATTENTION
    &attention_fwd_check, &attention_bwd_check,
#endif
};

const struct nw_check *const *nw_checks(unsigned *count)
{
	*count = sizeof(all_checks) / sizeof(all_checks[0]);
	return all_checks;
}

const char nw_runner_name[] = "numwatch-kernels gen " NW_STR(NW_GEN_VERSION) " / demolib " DL_VERSION;
