#include "gpus.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

int gpus_count(const char *dir, unsigned *count)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	*count = n;
	return 0;
}

int gpus_check_slots(const struct config *cfg, const char *dir, char *err, size_t errlen)
{
	const struct config_slot *top = NULL;
	unsigned have = 0;
	int rc;

	for (unsigned i = 0; i < cfg->nslots; i++)
		if (cfg->slots[i].gpu >= 0 && (!top || cfg->slots[i].gpu > top->gpu))
			top = &cfg->slots[i];
	if (!top)
		return 0;
	if (cfg->slots_gpus >= 0) {
		have = (unsigned)cfg->slots_gpus;
	} else if ((rc = gpus_count(dir, &have)) < 0) {
		snprintf(err, errlen,
			 "slot '%s' needs GPU %d, but this host shows no NVIDIA GPU ('%s': %s); if "
			 "its GPUs are there but not listed, say how many with [slots] gpus = N",
			 top->name, top->gpu, dir, strerror(-rc));
		return -EINVAL;
	}
	if ((unsigned)top->gpu < have)
		return 0;
	snprintf(err, errlen, "slot '%s' names GPU %d, which does not exist: this host has %u GPU%s (%s)%s",
		 top->name, top->gpu, have, have == 1 ? "" : "s", cfg->slots_gpus >= 0 ? "[slots] gpus" : dir,
		 have ? ", numbered from 0 as CUDA_VISIBLE_DEVICES counts them" : "");
	return -EINVAL;
}
