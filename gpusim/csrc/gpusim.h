/*
 * lamplighter gpusim: a simulated libamd_smi.so.
 *
 * Types below mirror the layouts the installed amdsmi Python package declares
 * in amdsmi_wrapper.py (all its structs are `_pack_ = 1` with explicit
 * PADDING_ fields, so they are packed here too). A contract test compares
 * every size with ctypes.sizeof() of the wrapper's struct via
 * gpusim_struct_size().
 *
 * The simulated GPUs live in a state folder ($LAMPLIGHTER_GPUSIM_DIR), see
 * gpusim/README.md. Every call re-reads the small per-GPU state file, so an
 * injection is visible to the next call.
 */
#ifndef LAMPLIGHTER_GPUSIM_H
#define LAMPLIGHTER_GPUSIM_H

#include <stddef.h>
#include <stdint.h>

#define GPUSIM_EXPORT __attribute__((visibility("default")))
#define GPUSIM_PACKED __attribute__((packed))

typedef uint32_t amdsmi_status_t;
typedef void *amdsmi_processor_handle;
typedef void *amdsmi_socket_handle;

enum {
    AMDSMI_STATUS_SUCCESS = 0,
    AMDSMI_STATUS_INVAL = 1,
    AMDSMI_STATUS_NOT_SUPPORTED = 2,
    AMDSMI_STATUS_OUT_OF_RESOURCES = 15,
    AMDSMI_STATUS_INIT_ERROR = 18,
    AMDSMI_STATUS_NOT_FOUND = 31,
    AMDSMI_STATUS_NOT_INIT = 32,
    AMDSMI_STATUS_DRIVER_NOT_LOADED = 34,
    AMDSMI_STATUS_NO_DATA = 40,
    AMDSMI_STATUS_INSUFFICIENT_SIZE = 41,
    AMDSMI_STATUS_UNKNOWN_ERROR = 0xFFFFFFFFu,
};

enum { AMDSMI_PROCESSOR_TYPE_AMD_GPU = 1 };

enum {
    AMDSMI_TEMPERATURE_TYPE_EDGE = 0,
    AMDSMI_TEMPERATURE_TYPE_HOTSPOT = 1,
    AMDSMI_TEMPERATURE_TYPE_VRAM = 2,
};

enum {
    AMDSMI_TEMP_CURRENT = 0,
    AMDSMI_TEMP_MAX = 1,
    AMDSMI_TEMP_CRITICAL = 5,
    AMDSMI_TEMP_EMERGENCY = 7,
    AMDSMI_TEMP_SHUTDOWN = 14,
};

enum { AMDSMI_MEM_TYPE_VRAM = 0, AMDSMI_MEM_TYPE_VIS_VRAM = 1, AMDSMI_MEM_TYPE_GTT = 2 };

enum { AMDSMI_RAS_ERR_STATE_DISABLED = 1, AMDSMI_RAS_ERR_STATE_ENABLED = 6 };

enum { AMDSMI_MEM_PAGE_STATUS_RESERVED = 0 };

enum {
    AMDSMI_EVT_NOTIF_NONE = 0,
    AMDSMI_EVT_NOTIF_VMFAULT = 1,
    AMDSMI_EVT_NOTIF_THERMAL_THROTTLE = 2,
    AMDSMI_EVT_NOTIF_GPU_PRE_RESET = 3,
    AMDSMI_EVT_NOTIF_GPU_POST_RESET = 4,
    AMDSMI_EVT_NOTIF_LAST = 13,
};

#define AMDSMI_GPU_UUID_SIZE 38
#define MAX_EVENT_NOTIFICATION_MSG_SIZE 64
#define AMDSMI_MAX_STRING_LENGTH 256

typedef union GPUSIM_PACKED {
    struct GPUSIM_PACKED {
        uint64_t function_number : 3;
        uint64_t device_number : 5;
        uint64_t bus_number : 8;
        uint64_t domain_number : 48;
    } fields;
    uint64_t as_uint;
} amdsmi_bdf_t;

typedef struct GPUSIM_PACKED {
    uint64_t correctable_count;
    uint64_t uncorrectable_count;
    uint64_t deferred_count;
    uint64_t reserved[5];
} amdsmi_error_count_t;

typedef struct GPUSIM_PACKED {
    uint32_t gfx_activity;
    uint32_t umc_activity;
    uint32_t mm_activity;
    uint32_t reserved[13];
} amdsmi_engine_usage_t;

typedef struct GPUSIM_PACKED {
    uint64_t socket_power;
    uint32_t current_socket_power;
    uint32_t average_socket_power;
    uint64_t gfx_voltage;
    uint64_t soc_voltage;
    uint64_t mem_voltage;
    uint32_t power_limit;
    uint8_t padding0[4];
    uint64_t reserved[18];
} amdsmi_power_info_t;

typedef struct GPUSIM_PACKED {
    uint32_t vram_total;
    uint32_t vram_used;
    uint32_t reserved[2];
} amdsmi_vram_usage_t;

typedef struct GPUSIM_PACKED {
    uint64_t page_address;
    uint64_t page_size;
    uint32_t status;
    uint8_t padding0[4];
} amdsmi_retired_page_record_t;

typedef struct GPUSIM_PACKED {
    char name[AMDSMI_MAX_STRING_LENGTH];
    uint32_t pid;
    uint8_t padding0[4];
    uint64_t mem;
    struct GPUSIM_PACKED {
        uint64_t gfx;
        uint64_t enc;
        uint32_t reserved[12];
    } engine_usage;
    struct GPUSIM_PACKED {
        uint64_t gtt_mem;
        uint64_t cpu_mem;
        uint64_t vram_mem;
        uint32_t reserved[10];
    } memory_usage;
    char container_name[AMDSMI_MAX_STRING_LENGTH];
    uint32_t cu_occupancy;
    uint32_t reserved[11];
} amdsmi_proc_info_t;

typedef struct GPUSIM_PACKED {
    amdsmi_processor_handle processor_handle;
    uint32_t event;
    char message[AMDSMI_MAX_STRING_LENGTH];
    uint8_t padding0[4];
} amdsmi_evt_notification_data_t;

typedef struct GPUSIM_PACKED {
    uint32_t major;
    uint32_t minor;
    uint32_t release;
    uint8_t padding0[4];
    const char *build;
} amdsmi_version_t;

/* ---- simulation state (state.c) ---- */

#define GPUSIM_MAX_GPUS 64
#define GPUSIM_MAX_PROCS 32
#define GPUSIM_NUM_BLOCKS 20

/* One ECC-capable block: its amdsmi_gpu_block_t bit and state-file name. */
struct gpusim_block {
    uint64_t bit;
    const char *name;
};
extern const struct gpusim_block gpusim_blocks[GPUSIM_NUM_BLOCKS];

struct gpusim_proc {
    uint32_t pid;
    uint64_t vram_bytes;
    char name[64];
};

/* What one GPU's state file says (see gpusim/README.md for the keys). */
struct gpusim_gpu_state {
    int hang;
    int lost;
    char bdf[32];
    char uuid[40];
    uint64_t ecc_enabled_mask;
    uint64_t ce[GPUSIM_NUM_BLOCKS], ue[GPUSIM_NUM_BLOCKS], de[GPUSIM_NUM_BLOCKS];
    int64_t temp_edge, temp_hotspot, temp_vram; /* degrees C; < -273 means "no sensor" */
    int64_t crit_edge, crit_hotspot, crit_vram;
    uint32_t gfx_activity, umc_activity, mm_activity;
    uint32_t power_w, power_limit_w;
    uint64_t vram_total_mb, vram_used_mb;
    uint32_t bad_pages, bad_page_threshold;
    uint32_t xgmi_status;
    int nprocs;
    struct gpusim_proc procs[GPUSIM_MAX_PROCS];
};

/* A simulated GPU as the library hands it out: the handle points here. */
struct gpusim_gpu {
    int index;            /* index in the state folder (gpu<index>.state) */
    uint64_t bdf;         /* as amdsmi_bdf_t.as_uint */
    int evt_enabled;      /* amdsmi_init_gpu_event_notification called */
    uint64_t evt_mask;
    long evt_cursor;      /* byte offset of the next unseen event line */
};

extern int gpusim_initialized;
extern int gpusim_ngpus;
extern struct gpusim_gpu gpusim_gpus[GPUSIM_MAX_GPUS];

const char *gpusim_dir(void);
int gpusim_node_gpu_count(void);
int gpusim_read_state(int index, struct gpusim_gpu_state *out);
int gpusim_parse_bdf(const char *text, uint64_t *out);
int gpusim_block_index(uint64_t bit);
void gpusim_sleep_ms(int ms);

/*
 * The gate every per-GPU call passes: checks init and the handle, re-reads the
 * GPU's state, blocks while it is hung and fails while it is lost. Returns
 * SUCCESS with *gpu and *st filled, or the status to return.
 */
amdsmi_status_t gpusim_enter(amdsmi_processor_handle h, struct gpusim_gpu **gpu, struct gpusim_gpu_state *st);

#endif
