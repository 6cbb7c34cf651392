/* nwd: small services of the shared context. */
#include "nwd.h"

#include <stdlib.h>
#include <string.h>

#include "bisector.h"
#include "builder.h"
#include "slot.h"

/*
 * What children inherit from the daemon's environment; everything else is
 * explicit. The MPS directories let runners that share a GPU reach a CUDA MPS
 * daemon (docs/operations.md): without it they time-slice the GPU.
 */
static const char *const passthrough[] = {"PATH",
					  "HOME",
					  "LANG",
					  "LC_ALL",
					  "TMPDIR",
					  "USER",
					  "LOGNAME",
					  "LD_LIBRARY_PATH",
					  "CUDA_HOME",
					  "CUDA_PATH",
					  "CUDA_MPS_PIPE_DIRECTORY",
					  "CUDA_MPS_LOG_DIRECTORY"};

void nwd_kick(struct nwd *d)
{
	if (d->draining)
		return;
	if (d->builder)
		builder_kick(d->builder);
	for (unsigned i = 0; i < d->nslots; i++)
		slot_kick(d->slots[i]);
}

char **nwd_env(const struct nwd *d, const char *const *extra)
{
	size_t n = 0, cap = sizeof(passthrough) / sizeof(passthrough[0]) + 1;
	char **env;

	for (size_t i = 0; extra && extra[i]; i++)
		cap++;
	env = calloc(cap, sizeof(char *));
	if (!env)
		return NULL;
	for (size_t i = 0; i < sizeof(passthrough) / sizeof(passthrough[0]); i++) {
		const char *v = getenv(passthrough[i]);
		size_t len;

		if (!v)
			continue;
		len = strlen(passthrough[i]) + strlen(v) + 2;
		env[n] = malloc(len);
		if (!env[n])
			goto fail;
		strcpy(env[n], passthrough[i]);
		strcat(env[n], "=");
		strcat(env[n], v);
		n++;
	}
	for (size_t i = 0; extra && extra[i]; i++) {
		env[n] = strdup(extra[i]);
		if (!env[n])
			goto fail;
		n++;
	}
	return env;
fail:
	nwd_env_free(env);
	return NULL;
}

void nwd_env_free(char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

const double nwd_build_bucket_le[NWD_BUILD_BUCKETS] = {1, 5, 15, 30, 60, 120, 300, 900};

void nwd_count_build(struct nwd *d, const char *status, double seconds)
{
	static const char *const names[] = {"ok", "failed", "timeout", "no_runner"};
	struct nwd_metrics *m = &d->metrics;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(status, names[i]) == 0)
			m->builds[i]++;
	for (int i = 0; i < NWD_BUILD_BUCKETS; i++)
		if (seconds <= nwd_build_bucket_le[i])
			m->build_buckets[i]++;
	m->build_count++;
	m->build_seconds += seconds;
}

void nwd_kick_bisector(struct nwd *d)
{
	if (d->bisector)
		bisector_kick(d->bisector);
}
