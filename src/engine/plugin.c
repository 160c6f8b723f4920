/* The engine plugin loader (plugin.h): dlopen, the one entry point, the version check, and the
 * plugin kinds the registry lists after the kinds compiled in. */
#include "engine/plugin.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

#define MAX_PLUGINS 16

struct loaded {
    char path[PATH_MAX]; /* realpath of the file */
    void *handle;
    const struct hs_plugin *desc;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct loaded plugins[MAX_PLUGINS];
static int n_plugins;

static void host_log(int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    hs_log(level < HS_LOG_ERROR   ? HS_LOG_ERROR
           : level > HS_LOG_DEBUG ? HS_LOG_DEBUG
                                  : level,
           "%s", line);
}

/* What plugins get; they may keep the pointer for as long as they are loaded. */
static struct hs_error declined; /* written by an entry point that declines, read under mu */
static const struct hs_plugin_host host = {.abi_version = HS_PLUGIN_ABI_VERSION,
                                           .engine_wrap = hs__engine_wrap,
                                           .log = host_log,
                                           .why = &declined};

int hs__engine_plugin_count(void)
{
    pthread_mutex_lock(&mu);
    int n = n_plugins;
    pthread_mutex_unlock(&mu);
    return n;
}

const struct hs_engine_kind *hs__engine_plugin_kind(int i)
{
    pthread_mutex_lock(&mu);
    const struct hs_engine_kind *k = i >= 0 && i < n_plugins ? &plugins[i].desc->kind : NULL;
    pthread_mutex_unlock(&mu);
    return k;
}

/* The kinds compiled in (registry.c), without plugins: a plugin may not shadow a built one. */
int hs__engine_builtin_count(void);
const struct hs_engine_kind *hs__engine_builtin_at(int i);

static hs_status load_locked(const char *path, const struct hs_engine_kind **kind,
                             struct hs_error *err)
{
    char real[PATH_MAX];
    if (!realpath(path, real))
        return hs_error_set(err, HS_STATUS_NOT_FOUND, "engine plugin %s: no such file", path);
    for (int i = 0; i < n_plugins; i++)
        if (!strcmp(plugins[i].path, real)) {
            if (kind) *kind = &plugins[i].desc->kind;
            return HS_STATUS_OK;
        }
    if (n_plugins == MAX_PLUGINS)
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "engine plugin %s: more than %d plugins",
                            path, MAX_PLUGINS);
    void *h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return hs_error_set(err, HS_STATUS_NOT_FOUND, "engine plugin %s: cannot load: %s", path,
                            why ? why : "?");
    }
    hs_plugin_entry_fn entry;
    /* dlsym returns an object pointer; POSIX guarantees it converts to a function pointer */
    *(void **)&entry = dlsym(h, HS_PLUGIN_ENTRY_NAME);
    if (!entry) {
        dlclose(h);
        return hs_error_set(err, HS_STATUS_NOT_FOUND,
                            "engine plugin %s: no entry point %s (not a hetserve engine plugin)",
                            path, HS_PLUGIN_ENTRY_NAME);
    }
    hs_error_clear(&declined);
    const struct hs_plugin *d = entry(&host);
    if (!d) {
        dlclose(h);
        return hs_error_set(err, HS_STATUS_UNSUPPORTED, "engine plugin %s declined to load: %s",
                            path, declined.msg[0] ? declined.msg : "no reason given");
    }
    /* the version first: nothing else of d may be read when it differs */
    if (d->abi_version != HS_PLUGIN_ABI_VERSION) {
        int v = d->abi_version;
        dlclose(h);
        return hs_error_set(err, HS_STATUS_UNSUPPORTED,
                            "engine plugin %s: built for engine plugin ABI version %d, this "
                            "hetserve speaks version %d: rebuild it against this hetserve's "
                            "engine/plugin.h",
                            path, v, HS_PLUGIN_ABI_VERSION);
    }
    const struct hs_engine_kind *k = &d->kind;
    if (!k->name || !*k->name || strlen(k->name) >= 16 || !k->create) {
        dlclose(h);
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "engine plugin %s: its kind has no name (1-15 characters) or no "
                            "create function",
                            path);
    }
    for (int i = 0; i < hs__engine_builtin_count(); i++) {
        const struct hs_engine_kind *b = hs__engine_builtin_at(i);
        if (!strcmp(b->name, k->name) && b->create) {
            dlclose(h);
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "engine plugin %s: kind '%s' is built into hetserve already", path,
                                k->name);
        }
    }
    for (int i = 0; i < n_plugins; i++)
        if (!strcmp(plugins[i].desc->kind.name, k->name)) {
            dlclose(h);
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "engine plugin %s: kind '%s' is already loaded from %s", path,
                                k->name, plugins[i].path);
        }
    struct loaded *l = &plugins[n_plugins++];
    snprintf(l->path, sizeof l->path, "%s", real);
    l->handle = h;
    l->desc = d;
    if (kind) *kind = k;
    return HS_STATUS_OK;
}

hs_status hs_engine_plugin_load(const char *path, const struct hs_engine_kind **kind,
                                struct hs_error *err)
{
    if (!path || !*path)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "engine plugin: no library path");
    hs_engine_plugins_discover(); /* so that a discovered plugin is found loaded, not twice */
    pthread_mutex_lock(&mu);
    hs_status s = load_locked(path, kind, err);
    pthread_mutex_unlock(&mu);
    return s;
}

static void discover_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    /* sorted, so that the registry's order does not depend on the file system */
    char names[MAX_PLUGINS][256];
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) && n < MAX_PLUGINS;) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "libhs_engine_", 13) || len < 4 || len >= sizeof names[0] ||
            strcmp(de->d_name + len - 3, ".so"))
            continue;
        int j = n++;
        while (j > 0 && strcmp(names[j - 1], de->d_name) > 0) {
            memcpy(names[j], names[j - 1], sizeof names[j]);
            j--;
        }
        snprintf(names[j], sizeof names[j], "%s", de->d_name);
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX + 512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct hs_error err = {0};
        pthread_mutex_lock(&mu);
        hs_status s = load_locked(path, NULL, &err);
        pthread_mutex_unlock(&mu);
        if (s) hs_log_warn("%s (skipped)", err.msg);
    }
}

static void discover(void)
{
    const char *env = getenv("HS_PLUGIN_PATH");
    if (env) {
        for (const char *p = env; *p;) {
            size_t len = strcspn(p, ":");
            if (len && len < PATH_MAX) {
                char dir[PATH_MAX];
                memcpy(dir, p, len);
                dir[len] = '\0';
                discover_dir(dir);
            }
            p += len;
            if (*p == ':') p++;
        }
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 16);
    if (n <= 0) return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return;
    snprintf(slash + 1, sizeof exe - (size_t)(slash + 1 - exe), "plugins");
    discover_dir(exe);
}

static pthread_once_t discover_once = PTHREAD_ONCE_INIT;

void hs_engine_plugins_discover(void)
{
    pthread_once(&discover_once, discover);
}
