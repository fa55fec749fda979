/*
 * Fake NVML: a tiny stand-in for libnvidia-ml.so.1 so that the real `pynvml` bindings
 * (package nvidia-ml-py) can be driven in tests on machines without an NVIDIA GPU.
 *
 * Built by tests/fake_nvml/__init__.py:
 *     cc -shared -fPIC -O1 -pthread -o DIR/libnvidia-ml.so.1 fake_nvml.c
 * and loaded by pynvml through `LD_LIBRARY_PATH=DIR` in a child process.
 *
 * Behaviour is set by environment variables, read by nvmlInit* whenever the library is not
 * already initialised (the first init, or a re-init after a full shutdown):
 *
 *   FAKE_NVML_DEVICE_COUNT   number of devices, 0..64 (default 2).
 *   FAKE_NVML_INIT_ERROR     an nvmlReturn_t number that nvmlInit* returns instead of success,
 *                            e.g. 9 (NVML_ERROR_DRIVER_NOT_LOADED). Unset or 0: success.
 *   FAKE_NVML_UNSUPPORTED    comma-separated exported function names (e.g.
 *                            "nvmlDeviceGetPowerUsage,nvmlDeviceGetTemperature") that return
 *                            NVML_ERROR_NOT_SUPPORTED (3) for every device.
 *   FAKE_NVML_ERRORS         comma-separated "function=code" pairs: that per-device function
 *                            returns nvmlReturn_t `code` for every device, e.g.
 *                            "nvmlDeviceGetMemoryInfo_v2=25" (ARGUMENT_VERSION_MISMATCH, a
 *                            driver that knows only v1) or "...=13" (FUNCTION_NOT_FOUND, what
 *                            pynvml raises when a symbol is missing). Checked after
 *                            FAKE_NVML_UNSUPPORTED.
 *   FAKE_NVML_LOST_INDEX     index of a device that falls off the bus ...
 *   FAKE_NVML_LOST_AFTER     ... once it has answered this many GPU-Util reads (default 0: lost
 *                            from the start). A GPU-Util read is a successful
 *                            nvmlDeviceGetUtilizationRates call or an nvmlDeviceGetSamples call
 *                            for GPU-Util samples that finds the buffer (new samples or none).
 *                            From then on every per-device call for it (handle look-ups
 *                            included) returns NVML_ERROR_GPU_IS_LOST (15); other devices keep
 *                            answering.
 *   FAKE_NVML_UTILIZATION_GPU  the point GPU-Util (nvmlDeviceGetUtilizationRates().gpu) of every
 *                            device, in percent (default 40 + i).
 *   FAKE_NVML_PROCESSES      comma-separated "pid:MiB" compute processes every device lists
 *                            (nvmlDeviceGetComputeRunningProcesses_v3 and _v2); the pid "self"
 *                            is the calling process. Device i adds 256 * i MiB to each, MIG
 *                            device j 64 * j MiB. Unset: no process.
 *   FAKE_NVML_MIG            comma-separated "index:count": those devices run in MIG mode with
 *                            `count` (1..7) MIG devices each; see "MIG" below.
 *   FAKE_NVML_ENERGY         comma-separated millijoule readings that successive
 *                            nvmlDeviceGetTotalEnergyConsumption calls return for each device
 *                            (its own sequence per device; the last value repeats), e.g.
 *                            "5000,9000,2000" for a counter that restarts. Unset: the counter
 *                            runs with time, see below.
 *
 * Sample buffers (nvmlDeviceGetSamples), one per sampling type, each supported only when its
 * script is set (otherwise, and for any other type, NVML_ERROR_NOT_SUPPORTED):
 *   FAKE_NVML_SAMPLES_GPU    comma-separated values of the GPU-Util buffer (type 1), repeated,
 *                            e.g. "100,0,0,0,0";
 *   FAKE_NVML_SAMPLES_MEMORY ... of the memory-utilization buffer (type 2);
 *   FAKE_NVML_SAMPLES_POWER  ... of the power buffer (type 0), in milliwatts.
 *   FAKE_NVML_SAMPLES_PERIOD_MS    spacing of the samples (default 200).
 *   FAKE_NVML_SAMPLES_CAPACITY     samples a buffer holds; older ones are gone (default 100).
 *   FAKE_NVML_SAMPLES_CLOCK  "realtime" (default) or "boottime": the clock of the timestamps.
 *   FAKE_NVML_SAMPLES_BACKDATE_MS  how long before the first nvmlInit* the buffers' origin lies
 *                            (default 0): samples that exist at once, without a test sleeping
 *                            for them (with a long period, none is added while it runs).
 *   FAKE_NVML_SAMPLES_REPLAY "1": every call returns the whole ring buffer, whatever its
 *                            lastSeenTimeStamp, so samples already returned come again with
 *                            the same timestamps (what NVML does when lastSeenTimeStamp is older
 *                            than its buffer); the caller must drop what it has seen.
 * Sample k (k = 0, 1, ...) of every buffer and device has the timestamp origin + k * period in
 * microseconds of that clock, where origin is the clock's time at the first nvmlInit*, and the
 * value script[k % length]; it exists once the clock has reached its timestamp. A call with
 * `samples` NULL answers the capacity (NVML's "how many can be queried"); a call with an array
 * returns, oldest first, the existing samples newer than lastSeenTimeStamp, or
 * NVML_ERROR_NOT_FOUND (6) when there is none. Values are NVML_VALUE_TYPE_UNSIGNED_INT.
 *   FAKE_NVML_GPM_SUPPORTED  "1": nvmlGpmQueryDeviceSupport reports support and GPM sampling
 *                            works; otherwise isSupportedDevice = 0 and the GPM sample calls
 *                            return NVML_ERROR_NOT_SUPPORTED.
 *
 * Deterministic values for device i:
 *   UUID "GPU-00000000-0000-0000-0000-%012d" (i zero-padded to 12 digits), name "Fake GPU i",
 *   utilization gpu = 40 + i %, memory = 20 + i %,
 *   memory (v2 query): total = 80 GiB, reserved = 512 MiB (the driver's own), used = (1 + i) GiB,
 *   free = total - reserved - used; the v1 query counts the reserved part as used:
 *   used = (1 + i) GiB + 512 MiB, free the same as v2's,
 *   power = 150000 + 1000 * i mW, temperature (NVML_TEMPERATURE_GPU) = 50 + i C,
 *   total energy = 1e9 mJ + that power times the time since the first nvmlInit* (realtime),
 *   clocks: graphics = SM = 1500 + i MHz, memory = 2600 + i MHz, video = 1300 + i MHz,
 *   CUDA compute capability 9.0; driver version "550.00.fake", NVML version "12.550.00.fake".
 *   GPM (when supported): GRAPHICS_UTIL = 70 + i, SM_UTIL = 60 + i, SM_OCCUPANCY = 30 + i,
 *   ANY/HMMA_TENSOR_UTIL = 25 + i, DFMA/IMMA_TENSOR_UTIL = 0, DRAM_BW_UTIL = 35 + i (percent);
 *   any other metric id gets nvmlReturn = NVML_ERROR_NOT_SUPPORTED.
 *
 * MIG: a device listed in FAKE_NVML_MIG answers nvmlDeviceGetMigMode with 1 (current and
 * pending) and nvmlDeviceGetMaxMigDeviceCount with 7; nvmlDeviceGetMigDeviceHandleByIndex
 * returns MIG device j for j < count and NVML_ERROR_NOT_FOUND for the other slots. Other devices
 * answer both with NVML_ERROR_NOT_SUPPORTED. MIG device j of device i has the UUID
 * "MIG-00000000-0000-0000-%04d-%012d" (i, j), the name "Fake GPU i MIG j", memory (v1 and v2)
 * total 10 GiB, reserved 0, used (1 + j) * 256 MiB, and lists the processes above; every other
 * per-device query on it returns NVML_ERROR_NOT_SUPPORTED. A lost device's MIG devices are lost.
 *
 * Like real NVML, init is reference counted: nvmlShutdown undoes one nvmlInit*, and every
 * query made while not initialised returns NVML_ERROR_UNINITIALIZED (1).
 *
 * Test-only introspection symbols (not part of NVML), read with ctypes:
 *   unsigned int fakeNvmlInitCount(void)      successful nvmlInit* calls so far in the process
 *   unsigned int fakeNvmlShutdownCount(void)  successful nvmlShutdown calls so far
 *   unsigned int fakeNvmlUtilizationCallCount(unsigned int index)
 *                                             GPU-Util reads answered (see FAKE_NVML_LOST_AFTER)
 *   unsigned long long fakeNvmlSamplesOrigin(void)
 *                                             the buffers' origin, microseconds of their clock
 *   void fakeNvmlReset(void)                  forgets all of the above and any nvmlInit* still
 *                                             open (for loading the fake into a test process
 *                                             itself, where it outlives one test)
 *
 * All state is guarded by one mutex: pynvml (ctypes) releases the GIL around calls, so a
 * sampler thread and the main thread may call in concurrently.
 */

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

#define EXPORT __attribute__((visibility("default")))

#define MAX_DEVICES 64
#define GIB (1024ULL * 1024ULL * 1024ULL)
#define MIB (1024ULL * 1024ULL)
#define RESERVED_BYTES (512ULL * MIB)
#define UNSUPPORTED_LIST_SIZE 4096
#define MAX_MIG 7
#define MAX_PROCESSES 16

typedef struct {
    unsigned int index; /* the physical device's index (for a MIG device, its parent's) */
    int mig;            /* -1: a physical device; otherwise the MIG device's slot on it */
} fake_device_t;
typedef fake_device_t *nvmlDevice_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

/* sizeof(nvmlMemory_v2_t) | (2 << 24), as in nvml.h and pynvml's `nvmlMemory_v2`. */
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

typedef struct {
    int filled;
    unsigned int device_index;
    unsigned long long sequence;
} fake_gpm_sample_t;
typedef fake_gpm_sample_t *nvmlGpmSample_t;

typedef struct {
    char *shortName;
    char *longName;
    char *unit;
} nvmlGpmMetricInfo_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[]; /* pynvml allocates NVML_GPM_METRIC_MAX entries. */
} nvmlGpmMetricsGet_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_device_t g_devices[MAX_DEVICES];
static fake_device_t g_mig_devices[MAX_DEVICES][MAX_MIG];
static unsigned int g_mig_count[MAX_DEVICES]; /* 0: not in MIG mode */
static long g_process_pids[MAX_PROCESSES];     /* 0: the calling process */
static unsigned long long g_process_mib[MAX_PROCESSES];
static unsigned int g_process_count = 0;
/* What a MIG device answers; every other per-device query is NOT_SUPPORTED on it. */
static const char k_mig_functions[] =
    ",nvmlDeviceGetUUID,nvmlDeviceGetName,nvmlDeviceGetMemoryInfo,nvmlDeviceGetMemoryInfo_v2,"
    "nvmlDeviceGetComputeRunningProcesses_v3,nvmlDeviceGetComputeRunningProcesses_v2,";
static unsigned int g_init_refcount = 0;
static unsigned int g_init_count = 0;
static unsigned int g_shutdown_count = 0;
static unsigned int g_device_count = 2;
static char g_unsupported[UNSUPPORTED_LIST_SIZE] = "";
static char g_errors[UNSUPPORTED_LIST_SIZE] = "";
static long g_lost_index = -1;
static unsigned long g_lost_after = 0;
static int g_gpm_supported = 0;
static unsigned int g_util_calls[MAX_DEVICES];
static unsigned long long g_gpm_sequence = 0;
static long g_point_gpu_utilization = -1;
#define MAX_ENERGY_SCRIPT 64
static unsigned long long g_energy_script[MAX_ENERGY_SCRIPT];
static unsigned int g_energy_length = 0;
static unsigned int g_energy_calls[MAX_DEVICES];
static unsigned long long g_energy_origin_us = 0;

#define SAMPLING_TYPES 3 /* NVML_TOTAL_POWER_SAMPLES, GPU_UTILIZATION, MEMORY_UTILIZATION */
#define MAX_SCRIPT 256
typedef struct {
    unsigned int values[MAX_SCRIPT];
    unsigned int length; /* 0: this buffer is not supported */
} sample_script_t;
static sample_script_t g_scripts[SAMPLING_TYPES];
static unsigned long long g_samples_period_us = 200000;
static unsigned long long g_samples_capacity = 100;
static clockid_t g_samples_clock = CLOCK_REALTIME;
static unsigned long long g_samples_origin_us = 0;
static int g_samples_replay = 0;

static long env_long(const char *name, long fallback) {
    const char *value = getenv(name);
    if (value == NULL || *value == '\0') return fallback;
    char *end = NULL;
    long parsed = strtol(value, &end, 10);
    return (end != NULL && *end == '\0') ? parsed : fallback;
}

static void read_script(sample_script_t *script, const char *name) {
    script->length = 0;
    const char *text = getenv(name);
    while (text != NULL && *text != '\0' && script->length < MAX_SCRIPT) {
        char *end = NULL;
        unsigned long value = strtoul(text, &end, 10);
        if (end == text) break;
        script->values[script->length++] = (unsigned int)value;
        text = *end == ',' ? end + 1 : end;
    }
}

static unsigned long long clock_us(clockid_t clock) {
    struct timespec now;
    clock_gettime(clock, &now);
    return (unsigned long long)now.tv_sec * 1000000ULL + (unsigned long long)now.tv_nsec / 1000ULL;
}

static void read_config(void) {
    long count = env_long("FAKE_NVML_DEVICE_COUNT", 2);
    if (count < 0) count = 0;
    if (count > MAX_DEVICES) count = MAX_DEVICES;
    g_device_count = (unsigned int)count;
    const char *unsupported = getenv("FAKE_NVML_UNSUPPORTED");
    /* Stored as ",a,b," so that a lookup of ",name," matches whole names only. */
    snprintf(g_unsupported, sizeof g_unsupported, ",%s,", unsupported ? unsupported : "");
    for (char *p = g_unsupported; *p; ++p) {
        if (*p == ' ') *p = ',';
    }
    const char *errors = getenv("FAKE_NVML_ERRORS");
    snprintf(g_errors, sizeof g_errors, ",%s,", errors ? errors : "");
    g_lost_index = env_long("FAKE_NVML_LOST_INDEX", -1);
    long after = env_long("FAKE_NVML_LOST_AFTER", 0);
    g_lost_after = after < 0 ? 0 : (unsigned long)after;
    g_gpm_supported = env_long("FAKE_NVML_GPM_SUPPORTED", 0) == 1;
    g_point_gpu_utilization = env_long("FAKE_NVML_UTILIZATION_GPU", -1);
    read_script(&g_scripts[0], "FAKE_NVML_SAMPLES_POWER");
    read_script(&g_scripts[1], "FAKE_NVML_SAMPLES_GPU");
    read_script(&g_scripts[2], "FAKE_NVML_SAMPLES_MEMORY");
    long period_ms = env_long("FAKE_NVML_SAMPLES_PERIOD_MS", 200);
    g_samples_period_us = (unsigned long long)(period_ms > 0 ? period_ms : 200) * 1000ULL;
    long capacity = env_long("FAKE_NVML_SAMPLES_CAPACITY", 100);
    g_samples_capacity = (unsigned long long)(capacity > 0 ? capacity : 100);
    const char *clock = getenv("FAKE_NVML_SAMPLES_CLOCK");
    g_samples_clock = clock != NULL && strcmp(clock, "boottime") == 0 ? CLOCK_BOOTTIME
                                                                      : CLOCK_REALTIME;
    g_samples_replay = env_long("FAKE_NVML_SAMPLES_REPLAY", 0) == 1;
    if (g_init_count == 0) {
        long backdate_ms = env_long("FAKE_NVML_SAMPLES_BACKDATE_MS", 0);
        g_samples_origin_us = clock_us(g_samples_clock) -
                              (unsigned long long)(backdate_ms > 0 ? backdate_ms : 0) * 1000ULL;
        g_energy_origin_us = clock_us(CLOCK_REALTIME);
    }
    g_energy_length = 0;
    const char *energy = getenv("FAKE_NVML_ENERGY");
    while (energy != NULL && *energy != '\0' && g_energy_length < MAX_ENERGY_SCRIPT) {
        char *end = NULL;
        unsigned long long value = strtoull(energy, &end, 10);
        if (end == energy) break;
        g_energy_script[g_energy_length++] = value;
        energy = *end == ',' ? end + 1 : end;
    }
    for (unsigned int i = 0; i < MAX_DEVICES; ++i) {
        g_devices[i].index = i;
        g_devices[i].mig = -1;
        g_mig_count[i] = 0;
        for (int j = 0; j < MAX_MIG; ++j) {
            g_mig_devices[i][j].index = i;
            g_mig_devices[i][j].mig = j;
        }
    }
    const char *mig = getenv("FAKE_NVML_MIG");
    while (mig != NULL && *mig != '\0') {
        char *end = NULL;
        unsigned long index = strtoul(mig, &end, 10);
        if (end == mig || *end != ':') break;
        unsigned long count = strtoul(end + 1, &end, 10);
        if (index < MAX_DEVICES) g_mig_count[index] = count > MAX_MIG ? MAX_MIG : (unsigned int)count;
        mig = *end == ',' ? end + 1 : end;
    }
    g_process_count = 0;
    const char *process = getenv("FAKE_NVML_PROCESSES");
    while (process != NULL && *process != '\0' && g_process_count < MAX_PROCESSES) {
        char *end = NULL;
        long pid = 0;
        if (strncmp(process, "self:", 5) == 0) {
            end = (char *)process + 4;
        } else {
            pid = strtol(process, &end, 10);
            if (end == process || *end != ':') break;
        }
        g_process_pids[g_process_count] = pid;
        g_process_mib[g_process_count++] = strtoull(end + 1, &end, 10);
        process = *end == ',' ? end + 1 : end;
    }
}

static int is_unsupported(const char *function) {
    char needle[256];
    snprintf(needle, sizeof needle, ",%s,", function);
    return strstr(g_unsupported, needle) != NULL;
}

/* The error FAKE_NVML_ERRORS sets for `function`, or NVML_SUCCESS. */
static nvmlReturn_t scripted_error(const char *function) {
    char needle[256];
    snprintf(needle, sizeof needle, ",%s=", function);
    const char *found = strstr(g_errors, needle);
    return found == NULL ? NVML_SUCCESS : (nvmlReturn_t)strtol(found + strlen(needle), NULL, 10);
}

static int is_lost(unsigned int index) {
    return g_lost_index >= 0 && (unsigned long)g_lost_index == index &&
           g_util_calls[index] >= g_lost_after;
}

/* Common checks for a per-device call; on success stores the device index. */
static int is_device(nvmlDevice_t device) {
    if (device >= &g_devices[0] && device < &g_devices[g_device_count]) return 1;
    fake_device_t *first = &g_mig_devices[0][0];
    if (device < first || device >= first + MAX_DEVICES * MAX_MIG) return 0;
    return device->index < g_device_count && (unsigned int)device->mig < g_mig_count[device->index];
}

static nvmlReturn_t check_device(const char *function, nvmlDevice_t device, unsigned int *index) {
    if (g_init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (!is_device(device)) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    if (is_lost(*index)) return NVML_ERROR_GPU_IS_LOST;
    if (device->mig >= 0) {
        char needle[256];
        snprintf(needle, sizeof needle, ",%s,", function);
        if (strstr(k_mig_functions, needle) == NULL) return NVML_ERROR_NOT_SUPPORTED;
    }
    if (is_unsupported(function)) return NVML_ERROR_NOT_SUPPORTED;
    return scripted_error(function);
}

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *value) {
    if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

static void format_uuid(char *out, size_t size, unsigned int index) {
    snprintf(out, size, "GPU-00000000-0000-0000-0000-%012u", index);
}

#define LOCKED(call)                       \
    do {                                   \
        pthread_mutex_lock(&g_lock);       \
        nvmlReturn_t _ret = (call);        \
        pthread_mutex_unlock(&g_lock);     \
        return _ret;                       \
    } while (0)

/* ---- init / shutdown / system ---------------------------------------------------------- */

static nvmlReturn_t do_init(void) {
    if (g_init_refcount == 0) read_config();
    long error = env_long("FAKE_NVML_INIT_ERROR", 0);
    if (error != 0) return (nvmlReturn_t)error;
    g_init_refcount++;
    g_init_count++;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    LOCKED(do_init());
}
EXPORT nvmlReturn_t nvmlInit_v2(void) { LOCKED(do_init()); }
EXPORT nvmlReturn_t nvmlInit(void) { LOCKED(do_init()); }

static nvmlReturn_t do_shutdown(void) {
    if (g_init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    g_init_refcount--;
    g_shutdown_count++;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlShutdown(void) { LOCKED(do_shutdown()); }

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
        case 0: return "Success";
        case 1: return "Uninitialized";
        case 2: return "Invalid Argument";
        case 3: return "Not Supported";
        case 4: return "Insufficient Permissions";
        case 5: return "Already Initialized";
        case 6: return "Not Found";
        case 7: return "Insufficient Size";
        case 8: return "Insufficient External Power";
        case 9: return "Driver Not Loaded";
        case 10: return "Timeout";
        case 12: return "NVML Shared Library Not Found";
        case 13: return "Function Not Found";
        case 15: return "GPU is lost";
        case 25: return "Argument Version Mismatch";
        default: return "Unknown Error";
    }
}

static nvmlReturn_t system_string(const char *function, char *out, unsigned int length,
                                  const char *value) {
    if (g_init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (is_unsupported(function)) return NVML_ERROR_NOT_SUPPORTED;
    return copy_string(out, length, value);
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    LOCKED(system_string("nvmlSystemGetDriverVersion", version, length, "550.00.fake"));
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    LOCKED(system_string("nvmlSystemGetNVMLVersion", version, length, "12.550.00.fake"));
}

/* ---- device enumeration ---------------------------------------------------------------- */

static nvmlReturn_t do_count(unsigned int *count) {
    if (g_init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = g_device_count;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { LOCKED(do_count(count)); }
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { LOCKED(do_count(count)); }

static nvmlReturn_t do_handle_by_index(unsigned int index, nvmlDevice_t *device) {
    if (g_init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= g_device_count) return NVML_ERROR_INVALID_ARGUMENT;
    if (is_lost(index)) return NVML_ERROR_GPU_IS_LOST;
    *device = &g_devices[index];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    LOCKED(do_handle_by_index(index, device));
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    LOCKED(do_handle_by_index(index, device));
}

static nvmlReturn_t do_handle_by_uuid(const char *uuid, nvmlDevice_t *device) {
    if (g_init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    char candidate[96];
    for (unsigned int i = 0; i < g_device_count; ++i) {
        format_uuid(candidate, sizeof candidate, i);
        if (strcmp(candidate, uuid) == 0) {
            if (is_lost(i)) return NVML_ERROR_GPU_IS_LOST;
            *device = &g_devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    LOCKED(do_handle_by_uuid(uuid, device));
}

/* ---- per-device queries ---------------------------------------------------------------- */

static nvmlReturn_t do_uuid(nvmlDevice_t device, char *out, unsigned int length) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetUUID", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    char value[96];
    if (device->mig >= 0)
        snprintf(value, sizeof value, "MIG-00000000-0000-0000-%04u-%012d", i, device->mig);
    else
        format_uuid(value, sizeof value, i);
    return copy_string(out, length, value);
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    LOCKED(do_uuid(device, uuid, length));
}

static nvmlReturn_t do_name(nvmlDevice_t device, char *out, unsigned int length) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetName", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    char value[96];
    if (device->mig >= 0)
        snprintf(value, sizeof value, "Fake GPU %u MIG %d", i, device->mig);
    else
        snprintf(value, sizeof value, "Fake GPU %u", i);
    return copy_string(out, length, value);
}
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    LOCKED(do_name(device, name, length));
}

static nvmlReturn_t do_index(nvmlDevice_t device, unsigned int *index) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetIndex", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (index == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *index = i;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    LOCKED(do_index(device, index));
}

static nvmlReturn_t do_utilization(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetUtilizationRates", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (utilization == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = g_point_gpu_utilization >= 0 ? (unsigned int)g_point_gpu_utilization
                                                    : 40 + i;
    utilization->memory = 20 + i;
    g_util_calls[i]++;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                  nvmlUtilization_t *utilization) {
    LOCKED(do_utilization(device, utilization));
}

static nvmlReturn_t do_memory(nvmlDevice_t device, nvmlMemory_t *memory) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetMemoryInfo", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    int mig = device->mig;
    memory->total = mig >= 0 ? 10 * GIB : 80 * GIB;
    memory->used = mig >= 0 ? (1ULL + mig) * 256 * MIB : (1ULL + i) * GIB + RESERVED_BYTES;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    LOCKED(do_memory(device, memory));
}

static nvmlReturn_t do_memory_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetMemoryInfo_v2", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    int mig = device->mig;
    memory->total = mig >= 0 ? 10 * GIB : 80 * GIB;
    memory->reserved = mig >= 0 ? 0 : RESERVED_BYTES;
    memory->used = mig >= 0 ? (1ULL + mig) * 256 * MIB : (1ULL + i) * GIB;
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    LOCKED(do_memory_v2(device, memory));
}

static nvmlReturn_t do_power(nvmlDevice_t device, unsigned int *power) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetPowerUsage", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (power == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *power = 150000 + 1000 * i;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    LOCKED(do_power(device, power));
}

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t; /* nvmlProcessInfo_v2_t, also used by _v3 */

static nvmlReturn_t do_processes(const char *function, nvmlDevice_t device, unsigned int *count,
                                 nvmlProcessInfo_t *infos) {
    unsigned int i;
    nvmlReturn_t ret = check_device(function, device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int available = *count;
    *count = g_process_count;
    if (g_process_count == 0) return NVML_SUCCESS;
    if (infos == NULL || available < g_process_count) return NVML_ERROR_INSUFFICIENT_SIZE;
    unsigned long long extra = device->mig >= 0 ? 64ULL * device->mig : 256ULL * i;
    for (unsigned int p = 0; p < g_process_count; ++p) {
        infos[p].pid = g_process_pids[p] == 0 ? (unsigned int)getpid() : (unsigned int)g_process_pids[p];
        infos[p].usedGpuMemory = (g_process_mib[p] + extra) * MIB;
        infos[p].gpuInstanceId = device->mig >= 0 ? (unsigned int)device->mig : 0xFFFFFFFFu;
        infos[p].computeInstanceId = device->mig >= 0 ? 0 : 0xFFFFFFFFu;
    }
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                            unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    LOCKED(do_processes("nvmlDeviceGetComputeRunningProcesses_v3", device, count, infos));
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                            unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    LOCKED(do_processes("nvmlDeviceGetComputeRunningProcesses_v2", device, count, infos));
}

/* ---- MIG -------------------------------------------------------------------------------- */

static nvmlReturn_t do_mig_mode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetMigMode", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (current == NULL || pending == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_mig_count[i] == 0) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = 1;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                         unsigned int *pending) {
    LOCKED(do_mig_mode(device, current, pending));
}

static nvmlReturn_t do_max_mig(nvmlDevice_t device, unsigned int *count) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetMaxMigDeviceCount", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_mig_count[i] == 0) return NVML_ERROR_NOT_SUPPORTED;
    *count = MAX_MIG;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    LOCKED(do_max_mig(device, count));
}

static nvmlReturn_t do_mig_handle(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetMigDeviceHandleByIndex", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (mig == NULL || index >= MAX_MIG) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_mig_count[i] == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= g_mig_count[i]) return NVML_ERROR_NOT_FOUND;
    *mig = &g_mig_devices[i][index];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *mig) {
    LOCKED(do_mig_handle(device, index, mig));
}

static nvmlReturn_t do_energy(nvmlDevice_t device, unsigned long long *energy) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetTotalEnergyConsumption", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (energy == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_energy_length > 0) {
        unsigned int call = g_energy_calls[i]++;
        *energy = g_energy_script[call < g_energy_length ? call : g_energy_length - 1];
        return NVML_SUCCESS;
    }
    unsigned long long elapsed_us = clock_us(CLOCK_REALTIME) - g_energy_origin_us;
    /* mW * us / 1e6 = mJ */
    *energy = 1000000000ULL + (150000ULL + 1000ULL * i) * elapsed_us / 1000000ULL;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                        unsigned long long *energy) {
    LOCKED(do_energy(device, energy));
}

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned long long timeStamp;
    nvmlValue_t sampleValue;
} nvmlSample_t;

static nvmlReturn_t do_samples(nvmlDevice_t device, unsigned int type, unsigned long long last_seen,
                               unsigned int *value_type, unsigned int *count,
                               nvmlSample_t *samples) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetSamples", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (value_type == NULL || count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (type >= SAMPLING_TYPES || g_scripts[type].length == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (type == 1 && samples == NULL) g_util_calls[i]++; /* one GPU-Util read per pynvml call */
    *value_type = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
    if (samples == NULL) {
        *count = (unsigned int)g_samples_capacity;
        return NVML_SUCCESS;
    }
    if (*count == 0) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long now = clock_us(g_samples_clock);
    if (now < g_samples_origin_us) return NVML_ERROR_NOT_FOUND;
    unsigned long long newest = (now - g_samples_origin_us) / g_samples_period_us;
    unsigned long long first = newest + 1 >= g_samples_capacity ? newest + 1 - g_samples_capacity : 0;
    if (!g_samples_replay && last_seen >= g_samples_origin_us) {
        unsigned long long after_seen = (last_seen - g_samples_origin_us) / g_samples_period_us + 1;
        if (after_seen > first) first = after_seen;
    }
    if (first > newest) {
        *count = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    unsigned long long available = newest - first + 1;
    unsigned int n = available < *count ? (unsigned int)available : *count;
    const sample_script_t *script = &g_scripts[type];
    for (unsigned int s = 0; s < n; ++s) {
        unsigned long long k = first + s;
        samples[s].timeStamp = g_samples_origin_us + k * g_samples_period_us;
        samples[s].sampleValue.uiVal = script->values[k % script->length];
    }
    *count = n;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, unsigned int type,
                                         unsigned long long lastSeenTimeStamp,
                                         unsigned int *sampleValType, unsigned int *sampleCount,
                                         nvmlSample_t *samples) {
    LOCKED(do_samples(device, type, lastSeenTimeStamp, sampleValType, sampleCount, samples));
}

static nvmlReturn_t do_temperature(nvmlDevice_t device, unsigned int sensor, unsigned int *temp) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetTemperature", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (temp == NULL || sensor != 0 /* NVML_TEMPERATURE_GPU */) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = 50 + i;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensor,
                                             unsigned int *temp) {
    LOCKED(do_temperature(device, sensor, temp));
}

static nvmlReturn_t do_clock(nvmlDevice_t device, unsigned int type, unsigned int *clock) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetClockInfo", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (clock == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    switch (type) {
        case 0: /* NVML_CLOCK_GRAPHICS */
        case 1: /* NVML_CLOCK_SM */
            *clock = 1500 + i;
            return NVML_SUCCESS;
        case 2: /* NVML_CLOCK_MEM */
            *clock = 2600 + i;
            return NVML_SUCCESS;
        case 3: /* NVML_CLOCK_VIDEO */
            *clock = 1300 + i;
            return NVML_SUCCESS;
        default:
            return NVML_ERROR_INVALID_ARGUMENT;
    }
}
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type,
                                           unsigned int *clock) {
    LOCKED(do_clock(device, type, clock));
}

static nvmlReturn_t do_compute_capability(nvmlDevice_t device, int *major, int *minor) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlDeviceGetCudaComputeCapability", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (major == NULL || minor == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *major = 9;
    *minor = 0;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                       int *minor) {
    LOCKED(do_compute_capability(device, major, minor));
}

/* ---- GPM -------------------------------------------------------------------------------- */

static nvmlReturn_t do_gpm_support(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlGpmQueryDeviceSupport", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (support == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != 1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = g_gpm_supported ? 1 : 0;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    LOCKED(do_gpm_support(device, support));
}

static nvmlReturn_t do_gpm_alloc(nvmlGpmSample_t *sample) {
    if (g_init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (sample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof(fake_gpm_sample_t));
    return *sample == NULL ? 20 /* NVML_ERROR_MEMORY */ : NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) { LOCKED(do_gpm_alloc(sample)); }

static nvmlReturn_t do_gpm_free(nvmlGpmSample_t sample) {
    if (sample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    free(sample);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) { LOCKED(do_gpm_free(sample)); }

static nvmlReturn_t do_gpm_get(nvmlDevice_t device, nvmlGpmSample_t sample) {
    unsigned int i;
    nvmlReturn_t ret = check_device("nvmlGpmSampleGet", device, &i);
    if (ret != NVML_SUCCESS) return ret;
    if (!g_gpm_supported) return NVML_ERROR_NOT_SUPPORTED;
    if (sample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    sample->filled = 1;
    sample->device_index = i;
    sample->sequence = ++g_gpm_sequence;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    LOCKED(do_gpm_get(device, sample));
}

static char k_percent[] = "%";
static char k_none[] = "";

static nvmlReturn_t do_gpm_metrics(nvmlGpmMetricsGet_t *request) {
    if (g_init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (is_unsupported("nvmlGpmMetricsGet") || !g_gpm_supported) return NVML_ERROR_NOT_SUPPORTED;
    if (request == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (request->version != 1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpmSample_t s1 = request->sample1, s2 = request->sample2;
    /* Two filled samples of one device, the second taken after the first. */
    if (s1 == NULL || s2 == NULL || !s1->filled || !s2->filled ||
        s1->device_index != s2->device_index || s2->sequence <= s1->sequence)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int i = s1->device_index;
    if (is_lost(i)) return NVML_ERROR_GPU_IS_LOST;
    for (unsigned int m = 0; m < request->numMetrics; ++m) {
        nvmlGpmMetric_t *metric = &request->metrics[m];
        double value = 0.0;
        nvmlReturn_t ret = NVML_SUCCESS;
        switch (metric->metricId) {
            case 1: value = 70 + i; break;  /* GRAPHICS_UTIL */
            case 2: value = 60 + i; break;  /* SM_UTIL */
            case 3: value = 30 + i; break;  /* SM_OCCUPANCY */
            case 5: value = 25 + i; break;  /* ANY_TENSOR_UTIL */
            case 6: value = 0; break;       /* DFMA_TENSOR_UTIL */
            case 7: value = 25 + i; break;  /* HMMA_TENSOR_UTIL */
            case 9: value = 0; break;       /* IMMA_TENSOR_UTIL */
            case 10: value = 35 + i; break; /* DRAM_BW_UTIL */
            default: ret = NVML_ERROR_NOT_SUPPORTED;
        }
        metric->nvmlReturn = ret;
        metric->value = value;
        metric->metricInfo.shortName = k_none;
        metric->metricInfo.longName = k_none;
        metric->metricInfo.unit = ret == NVML_SUCCESS ? k_percent : k_none;
    }
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *request) {
    LOCKED(do_gpm_metrics(request));
}

/* ---- test-only introspection ------------------------------------------------------------ */

EXPORT unsigned int fakeNvmlInitCount(void) {
    pthread_mutex_lock(&g_lock);
    unsigned int value = g_init_count;
    pthread_mutex_unlock(&g_lock);
    return value;
}

EXPORT unsigned int fakeNvmlShutdownCount(void) {
    pthread_mutex_lock(&g_lock);
    unsigned int value = g_shutdown_count;
    pthread_mutex_unlock(&g_lock);
    return value;
}

EXPORT unsigned int fakeNvmlUtilizationCallCount(unsigned int index) {
    pthread_mutex_lock(&g_lock);
    unsigned int value = index < MAX_DEVICES ? g_util_calls[index] : 0;
    pthread_mutex_unlock(&g_lock);
    return value;
}

EXPORT unsigned long long fakeNvmlSamplesOrigin(void) {
    pthread_mutex_lock(&g_lock);
    unsigned long long value = g_samples_origin_us;
    pthread_mutex_unlock(&g_lock);
    return value;
}

EXPORT void fakeNvmlReset(void) {
    pthread_mutex_lock(&g_lock);
    g_init_refcount = 0;
    g_init_count = 0;
    g_shutdown_count = 0;
    g_gpm_sequence = 0;
    memset(g_util_calls, 0, sizeof g_util_calls);
    memset(g_energy_calls, 0, sizeof g_energy_calls);
    pthread_mutex_unlock(&g_lock);
}
