/*
 * Reading the state folder. Files are tiny key=value text, replaced
 * atomically (write + rename) by the injector, so one open+read per call
 * always sees a whole file and makes an injection visible to the next call.
 */
#define _GNU_SOURCE
#include "gpusim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Order and names match amdsmi_gpu_block_t and gpusim/state.py BLOCKS. */
const struct gpusim_block gpusim_blocks[GPUSIM_NUM_BLOCKS] = {
    {1ull << 0, "umc"},   {1ull << 1, "sdma"},      {1ull << 2, "gfx"},   {1ull << 3, "mmhub"},
    {1ull << 4, "athub"}, {1ull << 5, "pcie_bif"},  {1ull << 6, "hdp"},   {1ull << 7, "xgmi_wafl"},
    {1ull << 8, "df"},    {1ull << 9, "smn"},       {1ull << 10, "sem"},  {1ull << 11, "mp0"},
    {1ull << 12, "mp1"},  {1ull << 13, "fuse"},     {1ull << 14, "mca"},  {1ull << 15, "vcn"},
    {1ull << 16, "jpeg"}, {1ull << 17, "ih"},       {1ull << 18, "mpio"}, {1ull << 63, "reserved"},
};

int gpusim_block_index(uint64_t bit) {
    for (int i = 0; i < GPUSIM_NUM_BLOCKS; i++)
        if (gpusim_blocks[i].bit == bit) return i;
    return -1;
}

const char *gpusim_dir(void) {
    const char *d = getenv("LAMPLIGHTER_GPUSIM_DIR");
    return (d && *d) ? d : NULL;
}

void gpusim_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* Reads a whole small file into buf (NUL-terminated); -1 if it cannot. */
static int read_small(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return (int)n;
}

int gpusim_node_gpu_count(void) {
    const char *dir = gpusim_dir();
    if (!dir) return -1;
    char path[4096], buf[1024];
    snprintf(path, sizeof path, "%s/node", dir);
    if (read_small(path, buf, sizeof buf) < 0) return -1;
    const char *p = strstr(buf, "gpus=");
    if (!p) return -1;
    int n = atoi(p + 5);
    return (n >= 0 && n <= GPUSIM_MAX_GPUS) ? n : -1;
}

int gpusim_parse_bdf(const char *text, uint64_t *out) {
    unsigned dom, bus, dev, fn;
    if (sscanf(text, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) return -1;
    amdsmi_bdf_t b;
    b.as_uint = 0;
    b.fields.domain_number = dom;
    b.fields.bus_number = bus & 0xff;
    b.fields.device_number = dev & 0x1f;
    b.fields.function_number = fn & 0x7;
    *out = b.as_uint;
    return 0;
}

static void set_defaults(struct gpusim_gpu_state *st) {
    memset(st, 0, sizeof *st);
    st->temp_edge = st->temp_hotspot = st->temp_vram = -1000;
    st->crit_edge = st->crit_hotspot = st->crit_vram = -1000;
    st->gfx_activity = st->umc_activity = st->mm_activity = 0xFFFF;
}

static void parse_proc(struct gpusim_gpu_state *st, const char *val) {
    if (st->nprocs >= GPUSIM_MAX_PROCS) return;
    struct gpusim_proc *p = &st->procs[st->nprocs];
    unsigned long long vram = 0;
    unsigned pid = 0;
    int used = 0;
    if (sscanf(val, "%u:%llu:%n", &pid, &vram, &used) < 2 || used == 0) return;
    p->pid = pid;
    p->vram_bytes = vram;
    snprintf(p->name, sizeof p->name, "%s", val + used);
    st->nprocs++;
}

static void parse_ecc(struct gpusim_gpu_state *st, const char *key, const char *val) {
    /* key is "<block>.<ce|ue|de>" */
    const char *dot = strrchr(key, '.');
    if (!dot) return;
    size_t blen = (size_t)(dot - key);
    for (int i = 0; i < GPUSIM_NUM_BLOCKS; i++) {
        if (strlen(gpusim_blocks[i].name) != blen || strncmp(gpusim_blocks[i].name, key, blen) != 0) continue;
        uint64_t v = strtoull(val, NULL, 10);
        if (strcmp(dot + 1, "ce") == 0) st->ce[i] = v;
        else if (strcmp(dot + 1, "ue") == 0) st->ue[i] = v;
        else if (strcmp(dot + 1, "de") == 0) st->de[i] = v;
        return;
    }
}

static void parse_line(struct gpusim_gpu_state *st, char *line) {
    char *eq = strchr(line, '=');
    if (!eq || line[0] == '#') return;
    *eq = '\0';
    const char *k = line, *v = eq + 1;
    long long iv = strtoll(v, NULL, 10);
    if (strcmp(k, "hang") == 0) st->hang = (int)iv;
    else if (strcmp(k, "lost") == 0) st->lost = (int)iv;
    else if (strcmp(k, "bdf") == 0) snprintf(st->bdf, sizeof st->bdf, "%s", v);
    else if (strcmp(k, "uuid") == 0) snprintf(st->uuid, sizeof st->uuid, "%s", v);
    else if (strcmp(k, "ecc_enabled_mask") == 0) st->ecc_enabled_mask = strtoull(v, NULL, 0);
    else if (strncmp(k, "ecc.", 4) == 0) parse_ecc(st, k + 4, v);
    else if (strcmp(k, "temp.edge") == 0) st->temp_edge = strcmp(v, "na") ? iv : -1000;
    else if (strcmp(k, "temp.hotspot") == 0) st->temp_hotspot = strcmp(v, "na") ? iv : -1000;
    else if (strcmp(k, "temp.vram") == 0) st->temp_vram = strcmp(v, "na") ? iv : -1000;
    else if (strcmp(k, "temp_crit.edge") == 0) st->crit_edge = strcmp(v, "na") ? iv : -1000;
    else if (strcmp(k, "temp_crit.hotspot") == 0) st->crit_hotspot = strcmp(v, "na") ? iv : -1000;
    else if (strcmp(k, "temp_crit.vram") == 0) st->crit_vram = strcmp(v, "na") ? iv : -1000;
    else if (strcmp(k, "activity.gfx") == 0) st->gfx_activity = (uint32_t)iv;
    else if (strcmp(k, "activity.umc") == 0) st->umc_activity = (uint32_t)iv;
    else if (strcmp(k, "activity.mm") == 0) st->mm_activity = (uint32_t)iv;
    else if (strcmp(k, "power_w") == 0) st->power_w = (uint32_t)iv;
    else if (strcmp(k, "power_limit_w") == 0) st->power_limit_w = (uint32_t)iv;
    else if (strcmp(k, "vram_total_mb") == 0) st->vram_total_mb = (uint64_t)iv;
    else if (strcmp(k, "vram_used_mb") == 0) st->vram_used_mb = (uint64_t)iv;
    else if (strcmp(k, "bad_pages") == 0) st->bad_pages = (uint32_t)iv;
    else if (strcmp(k, "bad_page_threshold") == 0) st->bad_page_threshold = (uint32_t)iv;
    else if (strcmp(k, "xgmi_status") == 0) st->xgmi_status = (uint32_t)iv;
    else if (strcmp(k, "proc") == 0) parse_proc(st, v);
}

int gpusim_read_state(int index, struct gpusim_gpu_state *out) {
    const char *dir = gpusim_dir();
    if (!dir) return -1;
    char path[4096], buf[8192];
    snprintf(path, sizeof path, "%s/gpu%d.state", dir, index);
    if (read_small(path, buf, sizeof buf) < 0) return -1;
    set_defaults(out);
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        parse_line(out, line);
    return 0;
}

static int handle_valid(amdsmi_processor_handle h) {
    struct gpusim_gpu *g = (struct gpusim_gpu *)h;
    return g >= gpusim_gpus && g < gpusim_gpus + gpusim_ngpus;
}

amdsmi_status_t gpusim_enter(amdsmi_processor_handle h, struct gpusim_gpu **gpu, struct gpusim_gpu_state *st) {
    if (!gpusim_initialized) return AMDSMI_STATUS_NOT_INIT;
    if (!h || !handle_valid(h)) return AMDSMI_STATUS_INVAL;
    struct gpusim_gpu *g = (struct gpusim_gpu *)h;
    for (;;) {
        /* A state file that vanished reads like a GPU whose sysfs node is gone. */
        if (gpusim_read_state(g->index, st) != 0) return AMDSMI_STATUS_NOT_SUPPORTED;
        if (!st->hang) break;
        /* A wedged driver blocks the caller; poll so that `gpusim clear` releases it. */
        gpusim_sleep_ms(10);
    }
    /*
     * A GPU that fell off the bus: its sysfs reads fail with ENODEV, which
     * rocm_smi's ErrnoToRsmiStatus() does not map (default branch), giving
     * RSMI_STATUS_UNKNOWN_ERROR and so AMDSMI_STATUS_UNKNOWN_ERROR.
     */
    if (st->lost) return AMDSMI_STATUS_UNKNOWN_ERROR;
    *gpu = g;
    return AMDSMI_STATUS_SUCCESS;
}
