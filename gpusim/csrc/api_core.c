/* Library lifetime, enumeration and identity: init, sockets, handles, BDF, UUID. */
#define _GNU_SOURCE
#include "gpusim.h"

#include <stdio.h>
#include <string.h>

#define AMDSMI_INIT_AMD_GPUS 2u

int gpusim_initialized = 0;
int gpusim_ngpus = 0;
struct gpusim_gpu gpusim_gpus[GPUSIM_MAX_GPUS];

/* MI300X sits one GPU per socket (SPX); the socket handle is its GPU's slot. */
static int socket_index(amdsmi_socket_handle s) {
    struct gpusim_gpu *g = (struct gpusim_gpu *)s;
    if (g < gpusim_gpus || g >= gpusim_gpus + gpusim_ngpus) return -1;
    return (int)(g - gpusim_gpus);
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_init(uint64_t flags) {
    int n = gpusim_node_gpu_count();
    if (n < 0) return AMDSMI_STATUS_DRIVER_NOT_LOADED;
    int count = 0;
    if (flags & AMDSMI_INIT_AMD_GPUS) {
        for (int i = 0; i < n; i++) {
            struct gpusim_gpu_state st;
            for (;;) {
                if (gpusim_read_state(i, &st) != 0) return AMDSMI_STATUS_INIT_ERROR;
                if (!st.hang) break;
                /* amdsmi_init opens every GPU: a wedged one blocks it, as on hardware. */
                gpusim_sleep_ms(10);
            }
            if (st.lost) continue; /* off the bus: not enumerated any more */
            struct gpusim_gpu *g = &gpusim_gpus[count++];
            memset(g, 0, sizeof *g);
            g->index = i;
            if (gpusim_parse_bdf(st.bdf, &g->bdf) != 0) g->bdf = (uint64_t)i << 8;
        }
    }
    gpusim_ngpus = count;
    gpusim_initialized = 1;
    return AMDSMI_STATUS_SUCCESS;
}

/* The simulation hands out no name/value pairs, so there is nothing to free. */
GPUSIM_EXPORT void amdsmi_free_name_value_pairs(void *pairs) { (void)pairs; }

GPUSIM_EXPORT amdsmi_status_t amdsmi_shut_down(void) {
    gpusim_initialized = 0;
    gpusim_ngpus = 0;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_socket_handles(uint32_t *count, amdsmi_socket_handle *handles) {
    if (!gpusim_initialized) return AMDSMI_STATUS_NOT_INIT;
    if (!count) return AMDSMI_STATUS_INVAL;
    if (!handles) {
        *count = (uint32_t)gpusim_ngpus;
        return AMDSMI_STATUS_SUCCESS;
    }
    uint32_t n = *count < (uint32_t)gpusim_ngpus ? *count : (uint32_t)gpusim_ngpus;
    for (uint32_t i = 0; i < n; i++) handles[i] = &gpusim_gpus[i];
    *count = n;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_socket_info(amdsmi_socket_handle s, size_t len, char *name) {
    if (!gpusim_initialized) return AMDSMI_STATUS_NOT_INIT;
    int i = socket_index(s);
    if (i < 0 || !name || len == 0) return AMDSMI_STATUS_INVAL;
    amdsmi_bdf_t b = {.as_uint = gpusim_gpus[i].bdf};
    snprintf(name, len, "%04llx:%02x:%02x.%x", (unsigned long long)b.fields.domain_number,
             (unsigned)b.fields.bus_number, (unsigned)b.fields.device_number, (unsigned)b.fields.function_number);
    return AMDSMI_STATUS_SUCCESS;
}

/* The processors of one socket, or of all sockets when s is NULL. */
static amdsmi_status_t list_processors(amdsmi_socket_handle s, uint32_t *count, amdsmi_processor_handle *out) {
    if (!gpusim_initialized) return AMDSMI_STATUS_NOT_INIT;
    if (!count) return AMDSMI_STATUS_INVAL;
    int first = 0, last = gpusim_ngpus;
    if (s) {
        first = socket_index(s);
        if (first < 0) return AMDSMI_STATUS_INVAL;
        last = first + 1;
    }
    uint32_t total = (uint32_t)(last - first);
    if (!out) {
        *count = total;
        return AMDSMI_STATUS_SUCCESS;
    }
    uint32_t n = *count < total ? *count : total;
    for (uint32_t i = 0; i < n; i++) out[i] = &gpusim_gpus[first + (int)i];
    *count = n;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_processor_handles(amdsmi_socket_handle s, uint32_t *count,
                                                           amdsmi_processor_handle *handles) {
    return list_processors(s, count, handles);
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_processor_handles_by_type(amdsmi_socket_handle s, uint32_t type,
                                                                   amdsmi_processor_handle *handles,
                                                                   uint32_t *count) {
    if (type != AMDSMI_PROCESSOR_TYPE_AMD_GPU) {
        if (!gpusim_initialized) return AMDSMI_STATUS_NOT_INIT;
        if (count) *count = 0;
        return count ? AMDSMI_STATUS_SUCCESS : AMDSMI_STATUS_INVAL;
    }
    return list_processors(s, count, handles);
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_processor_count_from_handles(amdsmi_processor_handle *handles,
                                                                      uint32_t *count, uint32_t *cpu,
                                                                      uint32_t *cores, uint32_t *gpus) {
    if (!handles || !count || !cpu || !cores || !gpus) return AMDSMI_STATUS_INVAL;
    *cpu = 0;
    *cores = 0;
    *gpus = *count;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_processor_type(amdsmi_processor_handle h, uint32_t *type) {
    if (!gpusim_initialized) return AMDSMI_STATUS_NOT_INIT;
    if (!type || socket_index(h) < 0) return AMDSMI_STATUS_INVAL;
    *type = AMDSMI_PROCESSOR_TYPE_AMD_GPU;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_processor_handle_from_bdf(amdsmi_bdf_t bdf, amdsmi_processor_handle *h) {
    if (!gpusim_initialized) return AMDSMI_STATUS_NOT_INIT;
    if (!h) return AMDSMI_STATUS_INVAL;
    for (int i = 0; i < gpusim_ngpus; i++) {
        if (gpusim_gpus[i].bdf == bdf.as_uint) {
            *h = &gpusim_gpus[i];
            return AMDSMI_STATUS_SUCCESS;
        }
    }
    return AMDSMI_STATUS_NOT_FOUND;
}

/* Identity is fixed at enumeration, like PCI config space: it answers even for a lost GPU's cached handle. */
GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_device_bdf(amdsmi_processor_handle h, amdsmi_bdf_t *bdf) {
    if (!gpusim_initialized) return AMDSMI_STATUS_NOT_INIT;
    int i = socket_index(h);
    if (i < 0 || !bdf) return AMDSMI_STATUS_INVAL;
    bdf->as_uint = gpusim_gpus[i].bdf;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_device_uuid(amdsmi_processor_handle h, uint32_t *len, char *uuid) {
    struct gpusim_gpu *g;
    struct gpusim_gpu_state st;
    amdsmi_status_t r = gpusim_enter(h, &g, &st);
    if (r != AMDSMI_STATUS_SUCCESS) return r;
    if (!len || !uuid) return AMDSMI_STATUS_INVAL;
    if (*len < AMDSMI_GPU_UUID_SIZE) {
        *len = AMDSMI_GPU_UUID_SIZE;
        return AMDSMI_STATUS_INSUFFICIENT_SIZE;
    }
    snprintf(uuid, *len, "%s", st.uuid);
    *len = (uint32_t)strlen(uuid);
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_processor_info(amdsmi_processor_handle h, size_t len, char *name) {
    if (!gpusim_initialized) return AMDSMI_STATUS_NOT_INIT;
    int i = socket_index(h);
    if (i < 0 || !name || len == 0) return AMDSMI_STATUS_INVAL;
    snprintf(name, len, "AMD Instinct MI300X (gpusim %d)", gpusim_gpus[i].index);
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_lib_version(amdsmi_version_t *v) {
    if (!v) return AMDSMI_STATUS_INVAL;
    memset(v, 0, sizeof *v);
    v->major = 7;
    v->minor = 0;
    v->release = 2;
    v->build = "lamplighter-gpusim";
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_status_code_to_string(amdsmi_status_t status, const char **out) {
    if (!out) return AMDSMI_STATUS_INVAL;
    switch (status) {
    case AMDSMI_STATUS_SUCCESS: *out = "AMDSMI_STATUS_SUCCESS: Call succeeded"; break;
    case AMDSMI_STATUS_INVAL: *out = "AMDSMI_STATUS_INVAL: Invalid parameters"; break;
    case AMDSMI_STATUS_NOT_SUPPORTED: *out = "AMDSMI_STATUS_NOT_SUPPORTED: Command not supported"; break;
    case AMDSMI_STATUS_NOT_INIT: *out = "AMDSMI_STATUS_NOT_INIT: Processor not initialized"; break;
    case AMDSMI_STATUS_NO_DATA: *out = "AMDSMI_STATUS_NO_DATA: No data was found for a given input"; break;
    case AMDSMI_STATUS_DRIVER_NOT_LOADED: *out = "AMDSMI_STATUS_DRIVER_NOT_LOADED: Driver not loaded"; break;
    default: *out = "AMDSMI_STATUS_UNKNOWN_ERROR: An unknown error occurred"; break;
    }
    return AMDSMI_STATUS_SUCCESS;
}

/* Not part of amdsmi: lets the contract test compare layouts with the wrapper's ctypes structs. */
GPUSIM_EXPORT size_t gpusim_struct_size(const char *name) {
    static const struct { const char *name; size_t size; } sizes[] = {
        {"amdsmi_bdf_t", sizeof(amdsmi_bdf_t)},
        {"amdsmi_error_count_t", sizeof(amdsmi_error_count_t)},
        {"amdsmi_engine_usage_t", sizeof(amdsmi_engine_usage_t)},
        {"amdsmi_power_info_t", sizeof(amdsmi_power_info_t)},
        {"amdsmi_vram_usage_t", sizeof(amdsmi_vram_usage_t)},
        {"amdsmi_retired_page_record_t", sizeof(amdsmi_retired_page_record_t)},
        {"amdsmi_proc_info_t", sizeof(amdsmi_proc_info_t)},
        {"amdsmi_evt_notification_data_t", sizeof(amdsmi_evt_notification_data_t)},
        {"amdsmi_version_t", sizeof(amdsmi_version_t)},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (name && strcmp(name, sizes[i].name) == 0) return sizes[i].size;
    return 0;
}
