/*
 * numwatch check SDK: how a check is declared and what it may use.
 *
 * A check is one pass of one op ("softmax.fwd"). It derives its shape and data
 * from (check, dtype, seed) through the seeded generator, computes a float64
 * reference and a plain same-dtype result on the host, runs the library's
 * kernel through nw_run_kernel() (which poisons and guards every output and
 * times the call), and fills one nw_tensor_result per output with
 * nw_compare(). The runner turns the trial into a protocol answer.
 *
 * Everything here is backend-neutral C; the device side (host memory or CUDA)
 * sits behind nw_device.h and is chosen when a runner is linked.
 */
#ifndef NUMWATCH_CHECK_H
#define NUMWATCH_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Version of the case derivation: family choice, shapes and data as functions
 * of the seed. Results with different versions are not comparable seed by
 * seed; bump it whenever any check draws anything differently.
 */
#define NW_GEN_VERSION 1

/* Caps, kept in step with the daemon's caps.h. */
#define NW_SHAPE_MAX       8
#define NW_TENSORS_MAX     16
#define NW_REPEATS_MAX     1000
#define NW_ERROR_MAX       256
#define NW_TENSOR_NAME_MAX 32

/* ---- dtypes and conversions ---------------------------------------------- */

enum nw_dtype {
	NW_F32 = 0,
	NW_F16,
	NW_BF16,
	NW_DTYPE_COUNT,
};

#define NW_DTYPE_BIT(d) (1u << (d))

/* "f32", "f16", "bf16". */
const char *nw_dtype_name(enum nw_dtype d);
/* Returns the dtype, or -1 for an unknown name. */
int nw_dtype_parse(const char *name);
size_t nw_dtype_size(enum nw_dtype d);
/* Machine epsilon (the spacing of values near 1): 2^-23, 2^-10, 2^-7. */
double nw_dtype_eps(enum nw_dtype d);
/* Smallest positive normal value. */
double nw_dtype_tiny(enum nw_dtype d);

/* Host-side conversions, round to nearest even; NaN stays NaN (quieted). */
uint16_t nw_f32_to_f16(float f);
float nw_f16_to_f32(uint16_t h);
uint16_t nw_f32_to_bf16(float f);
float nw_bf16_to_f32(uint16_t b);

/* Element i of a buffer of dtype d, as float / stored from float. */
float nw_load(enum nw_dtype d, const void *buf, size_t i);
void nw_store(enum nw_dtype d, void *buf, size_t i, float v);
/* Stores v[0..n) (through float, as nw_store) and reads each stored value back into v. */
void nw_store_n(enum nw_dtype d, void *buf, double *v, size_t n);
/* nw_f16_to_f32 of every f16 bit pattern, indexed by it (a table built on first use). */
const float *nw_f16_values(void);
/* v rounded to dtype d and back: one rounding step of a same-dtype program. */
float nw_round(enum nw_dtype d, float v);

/* ---- seeded generator ------------------------------------------------------ */

/*
 * Counter-based generator: value k of a stream is splitmix64's finaliser of
 * key + k * golden-ratio, so any value can be recomputed from (key, k). The
 * derived draws use integer arithmetic and exact IEEE operations only (no
 * libm), so a case is bit-identical on every machine.
 */
struct nw_rng {
	uint64_t key;
	uint64_t ctr;
};

uint64_t nw_mix64(uint64_t z);
/* FNV-1a 64 of a string, for keying streams by name. */
uint64_t nw_hash_str(const char *s);
/* A stream for (name, seed, stream): distinct purposes use distinct streams. */
void nw_rng_init(struct nw_rng *r, const char *name, uint64_t seed, uint64_t stream);
uint64_t nw_rng_u64(struct nw_rng *r);
/* Uniform integer in [lo, hi] (inclusive; hi >= lo). */
long nw_rng_range(struct nw_rng *r, long lo, long hi);
/* Uniform in [0, 1) with 53 random bits. */
double nw_rng_uniform(struct nw_rng *r);
/* Approximately standard normal (Irwin-Hall of 4 uniforms, unit variance, |v| < 3.47). */
double nw_rng_normal(struct nw_rng *r);

/* n draws of nw_rng_normal() at once, bit for bit (vectorised): out[i] is the i-th. */
void nw_rng_normals(struct nw_rng *r, double *out, long n);
/*
 * Whole tensors of normals: out[i] = offset + scale * (the i-th nw_rng_normal
 * of the stream (name, seed, stream)), exactly as that loop would draw them.
 * nw_rng_fill_normals() fills several such tensors at once, each in its own
 * thread when there is enough work to pay for one (the draws are
 * counter-based, so the values do not depend on the threads).
 */
struct nw_normals {
	const char *name;
	uint64_t seed, stream;
	uint64_t skip; /* draws of the stream taken before these (nw_rng_u64 calls) */
	double *out;
	long n;
	double scale, offset;
};
void nw_rng_fill_normals(const struct nw_normals *jobs, unsigned njobs);

/* ---- checks and trials ----------------------------------------------------- */

/* What nw_compare() measured for one output tensor (PROTOCOL.md "tensors"). */
struct nw_tensor_result {
	char name[NW_TENSOR_NAME_MAX];
	double ratio;   /* max_abs / budget; fail above 1 */
	double max_abs; /* over elements where kernel and reference are finite */
	double max_rel; /* same elements, reference non-zero */
	double max_ulp; /* fp32 only: distance to the reference rounded to fp32 */
	bool has_ulp;
	double plain_max_abs; /* error of the plain same-dtype program */
	double budget;        /* factor * plain_max_abs + floor, or the fixed atol */
	long nonfinite;       /* written kernel elements that are NaN or Inf */
	long ref_nonfinite;   /* reference elements that are NaN or Inf */
	long mismatch;        /* elements whose finiteness (or NaN/Inf class) differs from the reference */
	long unwritten;       /* elements still holding the poison pattern */
	long canary;          /* guard elements around the output that were overwritten */
	long excluded;        /* elements left out as non-smooth (counted, never hidden) */
	long worst[NW_SHAPE_MAX]; /* index of the worst element */
	unsigned worst_ndim;      /* 0 when there is no worst element (no error at all) */
	bool tail;                /* the worst element lies in a tail tile */
};

struct nw_check;

/*
 * A parameter of a case that its shape does not show (causal, padding, the
 * levels of a deformable attention): reported under "case"."params", for
 * people reading a trial. Integer or text.
 */
#define NW_PARAMS_MAX    8
#define NW_PARAM_STR_MAX 64

struct nw_param {
	const char *key; /* static string */
	bool is_int;
	long ival;
	char sval[NW_PARAM_STR_MAX];
};

/* One trial: the request, then what the check and the SDK filled in. */
struct nw_trial {
	/* request */
	enum nw_dtype dtype;
	uint64_t seed;
	int family; /* index into the check's families; -1: derive from the seed */
	unsigned repeats;

	/* case (the family index is resolved before the check runs) */
	uint64_t index; /* seed / nfamilies: position within the family's sweep */
	long shape[NW_SHAPE_MAX];
	unsigned ndim;
	struct nw_param params[NW_PARAMS_MAX];
	unsigned nparams;
	/* the inputs' bytes so far, chained through nw_digest (nw_input_upload) */
	uint64_t inputs_hash;
	unsigned ninputs;
	unsigned hashed_ahead; /* inputs hashed by nw_input_hash(), not yet uploaded */
	/* case.digest: nw_case_digest() of the finished case (nw_trial_run) */
	uint64_t case_digest;

	/* result */
	struct nw_tensor_result tensors[NW_TENSORS_MAX];
	unsigned ntensors;
	uint64_t digest;
	unsigned digests_differ;
	double kernel_us; /* median over repeats */

	/* an error answer instead of a verdict */
	bool error;
	bool fatal;
	char errmsg[NW_ERROR_MAX];
};

struct nw_check {
	const char *name; /* "softmax.fwd" */
	const char *op;   /* "softmax" */
	const char *pass; /* "fwd" or "bwd" */
	unsigned dtypes;  /* NW_DTYPE_BIT() mask */
	const char *const *families;
	unsigned nfamilies;
	bool deterministic;
	/* Budget factor on the plain program's error (the FlashAttention rule uses 2). */
	double budget_factor;
	/* Op-specific table of library entry points (borrowed; see checks/<op>.h). */
	const void *kernels;
	/*
	 * Runs one trial: t->family and t->index are resolved. Returns 0 with the
	 * tensors filled, or a negative error after nw_trial_error() (or after a
	 * failed nw_run_kernel(), which records the device error itself).
	 */
	int (*run)(const struct nw_check *check, struct nw_trial *t);
	/*
	 * Or the trial in two parts, for a device runner to prepare the next
	 * trial's inputs while this one's device work runs (sdk/prepare.c).
	 * prepare() does the host's part: the shape, the params, the inputs from
	 * the seed, each hashed with nw_input_hash() in upload order. It may run
	 * on another thread ahead of time, so it touches nothing but t and what
	 * it allocates: no device, no globals. run_prepared() does the rest
	 * (uploads, references, kernel, comparisons); release_prepared() frees
	 * what prepare() made, after the trial's end. run is then NULL.
	 */
	int (*prepare)(const struct nw_check *check, struct nw_trial *t, void **prepared);
	int (*run_prepared)(const struct nw_check *check, struct nw_trial *t, void *prepared);
	void (*release_prepared)(void *prepared);
};

/* All checks this runner knows, in hello order (checks/registry.c). */
const struct nw_check *const *nw_checks(unsigned *count);
const struct nw_check *nw_check_find(const char *name);
/* Returns the family index, or -1. */
int nw_check_family(const struct nw_check *c, const char *name);

/*
 * Resolves the family (seed % nfamilies unless t->family is set) and the
 * family index, runs the check, and returns its result. The caller sets
 * dtype, seed, family and repeats; everything else is reset here.
 */
int nw_trial_run(const struct nw_check *c, struct nw_trial *t);
/*
 * The case's identity, sent as case.digest (PROTOCOL.md): a 64-bit hash of
 * the check's name, the dtype, the family, the shape, the params and the
 * bytes of every input uploaded with nw_input_upload(), in upload order,
 * taken on the host before the upload. It depends on nothing else (not on
 * the library, the backend, the build or the seed itself), so it is the same
 * at every commit that generates the same inputs and differs when a check
 * draws anything differently. nw_trial_run() fills t->case_digest with it.
 */
uint64_t nw_case_digest(const struct nw_check *c, const struct nw_trial *t);
/* Adds a case parameter (ignored beyond NW_PARAMS_MAX; text is cut to fit). */
void nw_trial_param_int(struct nw_trial *t, const char *key, long value);
void nw_trial_param_str(struct nw_trial *t, const char *key, const char *value);
/*
 * Where a runner's time goes: with NW_TIMING=1 in its environment, a runner
 * prints the mean time per trial of each phase to stderr when it exits.
 * The SDK times generation (up to the first input upload), inputs, outputs,
 * kernel runs and comparisons itself; a check times its references
 * (nw_reference_done, or nw_phase_add(NW_PHASE_REFERENCE, t0) with t0 from
 * nw_now()); what is left is allocation, host-side set-up and clean-up.
 */
enum nw_phase {
	NW_PHASE_GENERATION, /* the trial's start to its first input upload */
	NW_PHASE_INPUTS,     /* allocating and uploading inputs */
	NW_PHASE_REFERENCE,  /* float64 reference and plain programs */
	NW_PHASE_OUTPUTS,    /* allocating and arming outputs */
	NW_PHASE_KERNEL,     /* the repeats: re-arm, launch, wait, fetch, digest */
	NW_PHASE_COMPARE,    /* nw_compare */
	NW_PHASES,
};
double nw_now(void); /* monotonic seconds */
void nw_phase_add(enum nw_phase p, double since);
/* Ends the trial's generation phase at its first call (nw_input_upload calls it). */
void nw_phase_inputs_begin(void);
/*
 * The end of a check's reference call begun at 'since': its time goes to
 * NW_PHASE_REFERENCE, and its failure (-ENOMEM, or -EIO after a device error
 * nw_device.h recorded) becomes the trial's error answer. Returns 0 or -EIO.
 */
int nw_reference_done(struct nw_trial *t, int rc, double since);

/* Records the device's last error (nw_device.h) as an error answer; returns -EIO. */
int nw_trial_device_error(struct nw_trial *t);
/* Records an error answer; returns -EIO for the caller to pass up. */
int nw_trial_error(struct nw_trial *t, bool fatal, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether the finished trial fails under the check contract (PRODUCT.md). */
bool nw_trial_failed(const struct nw_trial *t);
/* The largest tensor ratio. */
double nw_trial_ratio(const struct nw_trial *t);

/* ---- outputs: poison, canaries, repeats, timing ------------------------------ */

/*
 * An output tensor on the device, with NW_GUARD_BYTES of canary on each side.
 * Before every launch the data is filled with the dtype's poison NaN (a
 * payload no arithmetic produces) and the guards with a canary pattern.
 */
#define NW_GUARD_BYTES 256

struct nw_output {
	const char *name; /* borrowed */
	enum nw_dtype dtype;
	size_t count;
	void *dev;   /* where the kernel writes: count elements */
	void *host;  /* the first repeat's data, fetched after the kernel */
	long canary; /* guard elements found overwritten in any repeat */
	/* private */
	void *dev_alloc;
	unsigned char *first; /* guard + the first repeat's data + guard (page-locked): host points into it */
	unsigned char *fetch; /* the same for later repeats, fetch_slots of them used in turn */
	unsigned fetch_slots;
	bool dev_is_first; /* dev still holds the first repeat's data (a single repeat) */
};

/* Allocates and arms o. On failure records an error answer in t and returns it. */
int nw_output_init(struct nw_trial *t, struct nw_output *o, const char *name, enum nw_dtype d, size_t count);
void nw_output_release(struct nw_output *o);
/* Bits of the poison value of dtype d (the low bytes are used for 16-bit types). */
uint32_t nw_poison_bits(enum nw_dtype d);
/* Whether element i of a host buffer of dtype d still holds the poison. */
bool nw_is_poison(enum nw_dtype d, const void *buf, size_t i);

/*
 * An input tensor uploaded to the device (owned; nw_input_release() frees).
 * Its host bytes are hashed into the case's digest first (nw_case_digest), so
 * every input a kernel reads must come through here. On failure records an
 * error answer in t and returns it.
 */
int nw_input_upload(struct nw_trial *t, void **dev, const void *host, size_t bytes);
/*
 * An input's bytes into the case digest ahead of its upload, in
 * nw_check.prepare(): the upload then skips hashing it. Inputs must be
 * hashed in the order they are uploaded.
 */
void nw_input_hash(struct nw_trial *t, const void *host, size_t bytes);
void nw_input_release(void *dev);

/*
 * Runs launch(ctx) t->repeats times on the same inputs, re-arming every output
 * before each run. Fills t->digest (FNV-1a 64 over all outputs of the first
 * repeat), t->digests_differ, t->kernel_us, and each output's host copy and
 * canary count, once settled (nw_run_settle). A non-zero return of launch()
 * is an error answer ("<what> returned -22"). Returns 0 or a negative error
 * (already recorded).
 */
int nw_run_kernel(struct nw_trial *t, struct nw_output *outs, unsigned nouts, const char *what,
		  int (*launch)(void *ctx), void *ctx);
/*
 * The last repeats of nw_run_kernel() are queued, not waited for: this waits
 * and fills what they leave (digest, kernel_us, canaries, the host copy).
 * nw_compare() and nw_output_release() call it; a check that reads an output
 * otherwise must too. Returns 0 or the error already recorded in its trial.
 */
int nw_run_settle(void);

/* ---- metrics ------------------------------------------------------------------ */

/* Plain programs one comparison may weigh (see nw_compare_spec.plain). */
#define NW_PLAIN_MAX 8

/* Inputs of nw_compare(). ref and each plain hold out->count elements. */
struct nw_compare_spec {
	const struct nw_output *out; /* kernel data (host copy) and canary count */
	const double *ref;           /* float64 reference */
	/*
	 * The plain same-dtype program, run with its reductions in different
	 * orders; the largest error counts. One order alone can be exact by luck,
	 * which matters in f32, where kernel and plain round alike. None (nplain
	 * 0): a fixed atol/rtol.
	 */
	const double *plain[NW_PLAIN_MAX];
	unsigned nplain;
	/*
	 * Or, already reduced (a reference computed on the device downloads one
	 * array, not NW_PLAIN_MAX): per element, the largest |plain - ref| over
	 * the orders whose plain value is finite, 0 where none is. Either
	 * plain_err or nplain > 0 selects the budget rule.
	 */
	const double *plain_err;
	double factor; /* budget factor on the plain error */
	/*
	 * Floor of the budget: floor_eps * eps(dtype) * floor_scale. floor_eps 0
	 * picks NW_FLOOR_EPS; floor_scale 0 picks max|ref|. An op whose output is
	 * a difference of larger terms (softmax.bwd) gives their size instead, as
	 * that is what its rounding errors scale with.
	 */
	double floor_eps;
	double floor_scale;
	double atol, rtol;            /* fixed tolerance, used when nplain is 0 */
	const unsigned char *exclude; /* per element, non-zero: left out as non-smooth; may be NULL */
	/*
	 * Or the reference left on the device where it was computed (a GPU
	 * reference): ref_dev and plain_err_dev (or atol / rtol) replace ref,
	 * plain and plain_err, the device compares them with the output's first
	 * repeat, and only the metrics come back. floor_scale_dev: the floor's
	 * scale is the largest of these floor_scale_count values.
	 */
	const double *ref_dev, *plain_err_dev, *floor_scale_dev;
	size_t floor_scale_count;
	const long *dims; /* shape for the worst index */
	unsigned ndim;
	/*
	 * Tile width along the tiled axis: worst in [dim - dim % w, dim) is a
	 * tail. The tiled axis is counted from the end: tail_axis 0 (the
	 * default) is the last dimension, 1 the one before it (the sequence
	 * axis of a [batch, heads, seq, head_dim] tensor), and so on.
	 */
	unsigned tail_width;
	unsigned tail_axis;
};

/*
 * Default floor: 4 units of eps(dtype) at the tensor's scale, so a kernel a
 * few roundings away from an exact plain result (tiny shapes, where the plain
 * program can be exact by luck) still passes.
 */
#define NW_FLOOR_EPS 4.0

/* Fills r (name included) from s. Returns 0, or -EIO after a device error. */
int nw_compare(struct nw_tensor_result *r, const char *name, const struct nw_compare_spec *s);
/*
 * n tensors at once (r[i] from s[i], named names[i]): those compared on the
 * device share one wait. Returns 0, or -EIO after a device error.
 */
int nw_compare_n(struct nw_tensor_result *r, const char *const *names, const struct nw_compare_spec *s,
		 unsigned n);
bool nw_tensor_failed(const struct nw_tensor_result *r);

/*
 * Reduction orders for plain programs (sdk/order.c): a correct float program
 * may sum in any order, and one order alone is sometimes exact by luck. Order
 * 0 is first to last, 1 last to first, 2..7 interleave with strides 2, 3, 5,
 * 7, 11 and 13 (every stride-th element, from each residue in turn).
 * nw_order_index() maps step j of order o over n elements to an element.
 */
#define NW_ORDERS 8
long nw_order_index(int order, long j, long n); /* nw_order_at() of nw_order.h */
/* The whole permutation: idx[j] = nw_order_index(order, j, n). */
void nw_order_fill(int order, long n, long *idx);

/* FNV-1a 64, continuing from h (start with NW_FNV_OFFSET). */
#define NW_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t nw_fnv1a(uint64_t h, const void *data, size_t len);
/* The outputs' digest: a fast 64-bit hash (not FNV) continuing from h, for bytes that may differ. */
uint64_t nw_digest(uint64_t h, const void *data, size_t len);

#endif
