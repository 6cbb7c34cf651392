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

/* Sets "name=value" in the NULL-terminated 'env' of 'n' entries (room for one more), replacing one of that name. */
static int env_set(char **env, size_t *n, const char *name, size_t name_len, const char *value)
{
	char *kv = malloc(name_len + strlen(value) + 2);

	if (!kv)
		return -1;
	memcpy(kv, name, name_len);
	kv[name_len] = '=';
	strcpy(kv + name_len + 1, value);
	for (size_t i = 0; i < *n; i++) {
		if (strncmp(env[i], name, name_len) == 0 && env[i][name_len] == '=') {
			free(env[i]);
			env[i] = kv;
			return 0;
		}
	}
	env[(*n)++] = kv;
	return 0;
}

/*
 * The base pass-through list, then the configured list 'conf' (may be NULL),
 * then 'extra': a later entry replaces an earlier one of the same name, so
 * that a child never sees a variable twice.
 */
static char **env_build(const struct config_env *conf, const char *const *extra)
{
	size_t n = 0, cap = sizeof(passthrough) / sizeof(passthrough[0]) + 1;
	char **env;

	for (size_t i = 0; extra && extra[i]; i++)
		cap++;
	cap += conf ? conf->n : 0;
	env = calloc(cap, sizeof(char *));
	if (!env)
		return NULL;
	for (size_t i = 0; i < sizeof(passthrough) / sizeof(passthrough[0]); i++) {
		const char *v = getenv(passthrough[i]);

		if (v && env_set(env, &n, passthrough[i], strlen(passthrough[i]), v) < 0)
			goto fail;
	}
	for (unsigned i = 0; conf && i < conf->n; i++) {
		const struct config_env_var *var = &conf->vars[i];
		const char *v = var->value ? var->value : getenv(var->name);

		if (v && env_set(env, &n, var->name, strlen(var->name), v) < 0)
			goto fail;
	}
	for (size_t i = 0; extra && extra[i]; i++) {
		const char *eq = strchr(extra[i], '=');

		if (eq && env_set(env, &n, extra[i], (size_t)(eq - extra[i]), eq + 1) < 0)
			goto fail;
	}
	return env;
fail:
	nwd_env_free(env);
	return NULL;
}

char **nwd_env(const struct nwd *d, const char *const *extra)
{
	return env_build(NULL, extra);
}

char **nwd_build_env(const struct nwd *d, const char *const *extra)
{
	return env_build(&d->cfg.build_env, extra);
}

char **nwd_runner_env(const struct nwd *d, const char *const *extra)
{
	return env_build(&d->cfg.slots_env, extra);
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

void nwd_service_stopped(struct nwd *d)
{
	if (d->running_services > 0)
		d->running_services--;
}

void nwd_kick_bisector(struct nwd *d)
{
	if (d->bisector)
		bisector_kick(d->bisector);
}
