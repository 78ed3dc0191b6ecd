/* The health readings the supervisor uses: ECC/RAS, temperatures, activity, power, memory, bad pages, XGMI, processes. */
#define _GNU_SOURCE
#include "gpusim.h"

#include <stdio.h>
#include <string.h>

#define NA16 0xFFFFu /* what amdsmi writes for a reading the ASIC lacks; the package shows "N/A" */
#define MIB (1024ull * 1024ull)
#define GTT_TOTAL_BYTES (256ull * 1024ull * MIB)

#define ENTER()                                                  \
    struct gpusim_gpu *g;                                        \
    struct gpusim_gpu_state st;                                  \
    amdsmi_status_t r_ = gpusim_enter(h, &g, &st);               \
    if (r_ != AMDSMI_STATUS_SUCCESS) return r_;                  \
    (void)g

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_total_ecc_count(amdsmi_processor_handle h, amdsmi_error_count_t *ec) {
    ENTER();
    if (!ec) return AMDSMI_STATUS_INVAL;
    if (!st.ecc_enabled_mask) return AMDSMI_STATUS_NOT_SUPPORTED;
    memset(ec, 0, sizeof *ec);
    for (int i = 0; i < GPUSIM_NUM_BLOCKS; i++) {
        if (!(st.ecc_enabled_mask & gpusim_blocks[i].bit)) continue;
        ec->correctable_count += st.ce[i];
        ec->uncorrectable_count += st.ue[i];
        ec->deferred_count += st.de[i];
    }
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_ecc_count(amdsmi_processor_handle h, uint64_t block,
                                                       amdsmi_error_count_t *ec) {
    ENTER();
    if (!ec) return AMDSMI_STATUS_INVAL;
    int i = gpusim_block_index(block);
    if (i < 0) return AMDSMI_STATUS_INVAL;
    /* A block without RAS support has no <block>_err_count sysfs file: ENOENT -> NOT_SUPPORTED. */
    if (!(st.ecc_enabled_mask & block)) return AMDSMI_STATUS_NOT_SUPPORTED;
    memset(ec, 0, sizeof *ec);
    ec->correctable_count = st.ce[i];
    ec->uncorrectable_count = st.ue[i];
    ec->deferred_count = st.de[i];
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_ecc_enabled(amdsmi_processor_handle h, uint64_t *mask) {
    ENTER();
    if (!mask) return AMDSMI_STATUS_INVAL;
    *mask = st.ecc_enabled_mask;
    return AMDSMI_STATUS_SUCCESS;
}

static amdsmi_status_t block_state(amdsmi_processor_handle h, uint64_t block, uint32_t *state) {
    ENTER();
    if (!state) return AMDSMI_STATUS_INVAL;
    if (gpusim_block_index(block) < 0) return AMDSMI_STATUS_INVAL;
    *state = (st.ecc_enabled_mask & block) ? AMDSMI_RAS_ERR_STATE_ENABLED : AMDSMI_RAS_ERR_STATE_DISABLED;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_ecc_status(amdsmi_processor_handle h, uint64_t block, uint32_t *state) {
    return block_state(h, block, state);
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_ras_block_features_enabled(amdsmi_processor_handle h, uint64_t block,
                                                                        uint32_t *state) {
    return block_state(h, block, state);
}

/* Degrees Celsius: amdsmi divides the hwmon millidegrees by 1000 before returning. */
GPUSIM_EXPORT amdsmi_status_t amdsmi_get_temp_metric(amdsmi_processor_handle h, uint32_t sensor, uint32_t metric,
                                                     int64_t *value) {
    ENTER();
    if (!value) return AMDSMI_STATUS_INVAL;
    int64_t cur, crit;
    switch (sensor) {
    case AMDSMI_TEMPERATURE_TYPE_EDGE: cur = st.temp_edge; crit = st.crit_edge; break;
    case AMDSMI_TEMPERATURE_TYPE_HOTSPOT: cur = st.temp_hotspot; crit = st.crit_hotspot; break;
    case AMDSMI_TEMPERATURE_TYPE_VRAM: cur = st.temp_vram; crit = st.crit_vram; break;
    default: return AMDSMI_STATUS_NOT_SUPPORTED;
    }
    int64_t v;
    if (metric == AMDSMI_TEMP_CURRENT) v = cur;
    else if (metric == AMDSMI_TEMP_CRITICAL) v = crit;
    else return AMDSMI_STATUS_NOT_SUPPORTED;
    if (v < -273) return AMDSMI_STATUS_NOT_SUPPORTED; /* no such sensor on this ASIC */
    *value = v;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_activity(amdsmi_processor_handle h, amdsmi_engine_usage_t *u) {
    ENTER();
    if (!u) return AMDSMI_STATUS_INVAL;
    memset(u, 0, sizeof *u);
    u->gfx_activity = st.gfx_activity;
    u->umc_activity = st.umc_activity;
    u->mm_activity = st.mm_activity;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_busy_percent(amdsmi_processor_handle h, uint32_t *busy) {
    ENTER();
    if (!busy) return AMDSMI_STATUS_INVAL;
    *busy = st.gfx_activity;
    return AMDSMI_STATUS_SUCCESS;
}

/* Watts; MI300X reports no average power and no rail voltages (N/A). */
GPUSIM_EXPORT amdsmi_status_t amdsmi_get_power_info(amdsmi_processor_handle h, amdsmi_power_info_t *p) {
    ENTER();
    if (!p) return AMDSMI_STATUS_INVAL;
    memset(p, 0, sizeof *p);
    p->socket_power = st.power_w;
    p->current_socket_power = st.power_w;
    p->average_socket_power = NA16;
    p->gfx_voltage = NA16;
    p->soc_voltage = NA16;
    p->mem_voltage = NA16;
    p->power_limit = st.power_limit_w;
    return AMDSMI_STATUS_SUCCESS;
}

static amdsmi_status_t memory(amdsmi_processor_handle h, uint32_t type, uint64_t *out, int used) {
    ENTER();
    if (!out) return AMDSMI_STATUS_INVAL;
    switch (type) {
    case AMDSMI_MEM_TYPE_VRAM:
    case AMDSMI_MEM_TYPE_VIS_VRAM: *out = (used ? st.vram_used_mb : st.vram_total_mb) * MIB; break;
    case AMDSMI_MEM_TYPE_GTT: *out = used ? 16 * MIB : GTT_TOTAL_BYTES; break;
    default: return AMDSMI_STATUS_INVAL;
    }
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_memory_total(amdsmi_processor_handle h, uint32_t type, uint64_t *total) {
    return memory(h, type, total, 0);
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_memory_usage(amdsmi_processor_handle h, uint32_t type, uint64_t *used) {
    return memory(h, type, used, 1);
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_vram_usage(amdsmi_processor_handle h, amdsmi_vram_usage_t *v) {
    ENTER();
    if (!v) return AMDSMI_STATUS_INVAL;
    memset(v, 0, sizeof *v);
    v->vram_total = (uint32_t)st.vram_total_mb;
    v->vram_used = (uint32_t)st.vram_used_mb;
    return AMDSMI_STATUS_SUCCESS;
}

/* Retired pages: 4 KiB pages at deterministic addresses, all reserved (retired). */
GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_bad_page_info(amdsmi_processor_handle h, uint32_t *num_pages,
                                                           amdsmi_retired_page_record_t *info) {
    ENTER();
    if (!num_pages) return AMDSMI_STATUS_INVAL;
    if (!info) {
        *num_pages = st.bad_pages;
        return AMDSMI_STATUS_SUCCESS;
    }
    uint32_t n = *num_pages < st.bad_pages ? *num_pages : st.bad_pages;
    for (uint32_t i = 0; i < n; i++) {
        memset(&info[i], 0, sizeof info[i]);
        info[i].page_address = 0x7f0000000ull + (uint64_t)i * 0x1000ull;
        info[i].page_size = 0x1000;
        info[i].status = AMDSMI_MEM_PAGE_STATUS_RESERVED;
    }
    *num_pages = n;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_bad_page_threshold(amdsmi_processor_handle h, uint32_t *threshold) {
    ENTER();
    if (!threshold) return AMDSMI_STATUS_INVAL;
    *threshold = st.bad_page_threshold;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_gpu_xgmi_error_status(amdsmi_processor_handle h, uint32_t *status) {
    ENTER();
    if (!status) return AMDSMI_STATUS_INVAL;
    *status = st.xgmi_status;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_process_list(amdsmi_processor_handle h, uint32_t *max_processes,
                                                          amdsmi_proc_info_t *list) {
    ENTER();
    if (!max_processes) return AMDSMI_STATUS_INVAL;
    uint32_t have = (uint32_t)st.nprocs;
    if (!list || *max_processes < have) {
        uint32_t cap = list ? *max_processes : 0;
        *max_processes = have;
        return (list && cap < have) ? AMDSMI_STATUS_OUT_OF_RESOURCES : AMDSMI_STATUS_SUCCESS;
    }
    for (uint32_t i = 0; i < have; i++) {
        amdsmi_proc_info_t *p = &list[i];
        memset(p, 0, sizeof *p);
        snprintf(p->name, sizeof p->name, "%s", st.procs[i].name);
        p->pid = st.procs[i].pid;
        p->mem = st.procs[i].vram_bytes;
        p->memory_usage.vram_mem = st.procs[i].vram_bytes;
        p->cu_occupancy = 0xFFFFFFFFu;
    }
    *max_processes = have;
    return AMDSMI_STATUS_SUCCESS;
}
