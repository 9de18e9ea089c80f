// parity's CUPTI graph-node tracer: an injection library (CUDA_INJECTION64_PATH) that records
// every kernel, memcpy and memset as CUPTI activity records, a kernel inside a replayed CUDA
// graph as its own record with its graph id and graph-node id (what nsys calls
// --cuda-graph-trace=node), and writes them as tab-separated lines that parity turns into the
// tables of an nsys SQLite export (parity/tracer/trace.py reads this format; keep them in step).
//
// Environment (parity sets it):
//   PARITY_CUPTI_OUT          output path; "%p" is replaced by the process id (required)
//   PARITY_CUPTI_BUFFER_KB    size of one activity buffer (default 8192)
//   PARITY_CUPTI_MAX_BUFFERS  buffers in the pool at most (default 64); when all are in CUPTI's
//                             hands CUPTI drops records and counts them: the footer says how many
//   PARITY_CUPTI_GRAPH_NODES  0: do not count the nodes of instantiated graphs
//
// Lines (fields tab-separated):
//   # parity-cupti <format> / # cupti_version <n> / # pid <n> / # out <path>
//   N id mangled demangled                      a kernel name, before its first K line
//   K start end device context stream correlation graphId graphNodeId gridX gridY gridZ
//     blockX blockY blockZ registers staticSmem dynamicSmem localPerThread launchType name_id
//   M start end device context stream correlation graphId graphNodeId copyKind srcKind dstKind bytes
//   S start end device context stream correlation graphId graphNodeId value bytes memoryKind
//   G graphId graphExecId nodes kernelNodes     an instantiated graph (cuGraphInstantiate)
//   L correlation graphExecId graphId           a graph launch (cuGraphLaunch)
//   (G and L lines are gathered on the application's threads and written with each buffer of
//   records and at exit: not in time order with the K lines; nothing reads them in order)
//   # dropped <n> / # buffers <requested> <refused> / # records <K> <M> <S> <L> / # end
// A file without "# end" belongs to a process that did not exit normally: parity refuses it.
#include <cupti.h>
#include <cuda.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#define PARITY_CUPTI_FORMAT 1
#define ALIGN 8

namespace {

std::mutex g_mu;            // the file, the name table, the record counters
std::mutex g_pool_mu;       // the buffer pool
std::mutex g_graph_mu;      // graphs and launches: taken on the application's threads, never held while records are written
FILE *g_out = nullptr;
pid_t g_pid = 0;
size_t g_buf_size = 8u << 20;
size_t g_max_buffers = 64;
size_t g_allocated = 0;
std::vector<uint8_t *> g_free;
uint64_t g_dropped = 0, g_requested = 0, g_refused = 0;
uint64_t g_kernels = 0, g_memcpys = 0, g_memsets = 0;
bool g_count_nodes = true;
std::unordered_map<const char *, uint32_t> g_names;
// under g_graph_mu: a launch callback only appends a line here, so a graph launch never waits
// for a buffer of records being written (tens of ms for a full buffer)
std::unordered_map<uint32_t, uint32_t> g_exec_graph;  // graphExecId -> graphId
std::string g_pending;                                 // G and L lines not yet in the file
uint64_t g_launches = 0;
CUpti_SubscriberHandle g_subscriber;

std::string clean(const char *s) {
  std::string out = s ? s : "";
  for (char &c : out)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return out;
}

uint32_t name_id(const char *name) {  // under g_mu
  auto it = g_names.find(name);
  if (it != g_names.end()) return it->second;
  uint32_t id = (uint32_t)g_names.size() + 1;
  g_names.emplace(name, id);
  int status = 0;
  char *dem = name ? abi::__cxa_demangle(name, nullptr, nullptr, &status) : nullptr;
  std::string m = clean(name), d = (dem && status == 0) ? clean(dem) : m;
  free(dem);
  fprintf(g_out, "N\t%u\t%s\t%s\n", id, m.c_str(), d.c_str());
  return id;
}

void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_requested++;
  *max_records = 0;
  if (!g_free.empty()) {
    *buffer = g_free.back();
    g_free.pop_back();
    *size = g_buf_size;
    return;
  }
  if (g_allocated < g_max_buffers) {
    uint8_t *b = (uint8_t *)aligned_alloc(ALIGN, g_buf_size);
    if (b) {
      g_allocated++;
      *buffer = b;
      *size = g_buf_size;
      return;
    }
  }
  g_refused++;  // CUPTI drops the records it cannot place and counts them
  *buffer = nullptr;
  *size = 0;
}

void write_record(CUpti_Activity *r) {  // under g_mu
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      auto *k = (CUpti_ActivityKernel10 *)r;
      uint32_t id = name_id(k->name);
      fprintf(g_out, "K\t%llu\t%llu\t%u\t%u\t%u\t%u\t%u\t%llu\t%d\t%d\t%d\t%d\t%d\t%d\t%u\t%d\t%d\t%u\t%u\t%u\n",
              (unsigned long long)k->start, (unsigned long long)k->end, k->deviceId, k->contextId, k->streamId,
              k->correlationId, k->graphId, (unsigned long long)k->graphNodeId, k->gridX, k->gridY, k->gridZ,
              k->blockX, k->blockY, k->blockZ, (unsigned)k->registersPerThread, k->staticSharedMemory,
              k->dynamicSharedMemory, k->localMemoryPerThread, (unsigned)k->launchType, id);
      g_kernels++;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      auto *m = (CUpti_ActivityMemcpy6 *)r;
      fprintf(g_out, "M\t%llu\t%llu\t%u\t%u\t%u\t%u\t%u\t%llu\t%u\t%u\t%u\t%llu\n", (unsigned long long)m->start,
              (unsigned long long)m->end, m->deviceId, m->contextId, m->streamId, m->correlationId, m->graphId,
              (unsigned long long)m->graphNodeId, (unsigned)m->copyKind, (unsigned)m->srcKind, (unsigned)m->dstKind,
              (unsigned long long)m->bytes);
      g_memcpys++;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      auto *s = (CUpti_ActivityMemset4 *)r;
      fprintf(g_out, "S\t%llu\t%llu\t%u\t%u\t%u\t%u\t%u\t%llu\t%u\t%llu\t%u\n", (unsigned long long)s->start,
              (unsigned long long)s->end, s->deviceId, s->contextId, s->streamId, s->correlationId, s->graphId,
              (unsigned long long)s->graphNodeId, s->value, (unsigned long long)s->bytes, (unsigned)s->memoryKind);
      g_memsets++;
      break;
    }
    default:
      break;
  }
}

uint64_t write_pending() {  // under g_mu: the graph and launch lines gathered since the last call; the launches counted with them
  std::string lines;
  uint64_t launches;
  {
    std::lock_guard<std::mutex> lock(g_graph_mu);
    lines.swap(g_pending);
    launches = g_launches;
  }
  if (g_out && !lines.empty()) fwrite(lines.data(), 1, lines.size(), g_out);
  return launches;
}

void pend(const char *line, int n) {  // under g_graph_mu
  if (n > 0) g_pending.append(line, (size_t)n < 256 ? (size_t)n : 255);
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    CUpti_Activity *record = nullptr;
    if (g_out && valid > 0) {
      while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) write_record(record);
    }
    write_pending();
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
  }
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_free.push_back(buffer);
}

typedef CUresult (*GetNodes)(CUgraph, CUgraphNode *, size_t *);
typedef CUresult (*NodeType)(CUgraphNode, CUgraphNodeType *);

void *driver_symbol(const char *name) {
  // a static cudart (nvcc's default) dlopens libcuda RTLD_LOCAL, out of RTLD_DEFAULT's reach
  void *sym = dlsym(RTLD_DEFAULT, name);
  if (sym) return sym;
  static void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  return driver ? dlsym(driver, name) : nullptr;
}

void graph_nodes(CUgraph graph, size_t *nodes, size_t *kernels) {  // via the driver already loaded
  static GetNodes get_nodes = (GetNodes)driver_symbol("cuGraphGetNodes");
  static NodeType node_type = (NodeType)driver_symbol("cuGraphNodeGetType");
  *nodes = *kernels = (size_t)-1;
  if (!get_nodes || !node_type || get_nodes(graph, nullptr, nodes) != CUDA_SUCCESS) return;
  std::vector<CUgraphNode> all(*nodes);
  size_t n = *nodes;
  if (n && get_nodes(graph, all.data(), &n) != CUDA_SUCCESS) return;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    CUgraphNodeType t;
    if (node_type(all[i], &t) == CUDA_SUCCESS && t == CU_GRAPH_NODE_TYPE_KERNEL) k++;
  }
  *kernels = k;
}

void CUPTIAPI on_callback(void *, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
    cuptiActivityFlushAll(0);  // the context's records, before they go with it
    return;
  }
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED) {
    auto *res = (const CUpti_ResourceData *)data;
    auto *g = (const CUpti_GraphData *)res->resourceDescriptor;
    uint32_t gid = 0, eid = 0;
    cuptiGetGraphId(g->graph, &gid);
    cuptiGetGraphExecId(g->graphExec, &eid);
    size_t nodes = (size_t)-1, kernels = (size_t)-1;
    if (g_count_nodes) graph_nodes(g->graph, &nodes, &kernels);
    char line[256];
    int n = snprintf(line, sizeof line, "G\t%u\t%u\t%lld\t%lld\n", gid, eid, (long long)nodes, (long long)kernels);
    std::lock_guard<std::mutex> lock(g_graph_mu);
    g_exec_graph[eid] = gid;
    pend(line, n);
    return;
  }
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API &&
      (cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch || cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz)) {
    auto *info = (const CUpti_CallbackData *)data;
    if (info->callbackSite != CUPTI_API_ENTER) return;
    CUgraphExec exec = cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch
                           ? ((const cuGraphLaunch_params *)info->functionParams)->hGraph
                           : ((const cuGraphLaunch_ptsz_params *)info->functionParams)->hGraphExec;
    uint32_t eid = 0;
    cuptiGetGraphExecId(exec, &eid);
    std::lock_guard<std::mutex> lock(g_graph_mu);
    auto it = g_exec_graph.find(eid);
    g_launches++;
    char line[256];
    pend(line, snprintf(line, sizeof line, "L\t%u\t%u\t%lld\n", info->correlationId, eid, it == g_exec_graph.end() ? -1LL : (long long)it->second));
  }
}

void at_exit() {
  if (!g_out || getpid() != g_pid) return;  // a forked child does not close its parent's trace
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mu);
  uint64_t launches = write_pending();
  fprintf(g_out, "# dropped %llu\n# buffers %llu %llu\n# records %llu %llu %llu %llu\n# end\n", (unsigned long long)g_dropped,
          (unsigned long long)g_requested, (unsigned long long)g_refused, (unsigned long long)g_kernels,
          (unsigned long long)g_memcpys, (unsigned long long)g_memsets, (unsigned long long)launches);
  fclose(g_out);
  g_out = nullptr;
}

size_t env_size(const char *name, size_t fallback) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end = nullptr;
  unsigned long long n = strtoull(v, &end, 10);
  return (end && *end == 0 && n > 0) ? (size_t)n : fallback;
}

bool check(CUptiResult r, const char *what) {
  if (r == CUPTI_SUCCESS) return true;
  const char *msg = nullptr;
  cuptiGetResultString(r, &msg);
  fprintf(stderr, "parity-cupti: %s failed: %s\n", what, msg ? msg : "?");
  if (g_out) fprintf(g_out, "# error %s: %s\n", what, msg ? msg : "?");
  return false;
}

}  // namespace

extern "C" int InitializeInjection(void) {
  static bool done = false;
  if (done) return 1;
  done = true;
  const char *out = getenv("PARITY_CUPTI_OUT");
  if (!out || !*out) {
    fprintf(stderr, "parity-cupti: PARITY_CUPTI_OUT is not set: not tracing\n");
    return 0;
  }
  g_pid = getpid();
  std::string path = out;
  size_t at = path.find("%p");
  if (at != std::string::npos) path.replace(at, 2, std::to_string((long)g_pid));
  g_out = fopen(path.c_str(), "w");
  if (!g_out) {
    fprintf(stderr, "parity-cupti: cannot write %s\n", path.c_str());
    return 0;
  }
  setvbuf(g_out, nullptr, _IOFBF, 1 << 20);
  g_buf_size = env_size("PARITY_CUPTI_BUFFER_KB", 8192) << 10;
  g_max_buffers = env_size("PARITY_CUPTI_MAX_BUFFERS", 64);
  const char *nodes = getenv("PARITY_CUPTI_GRAPH_NODES");
  g_count_nodes = !(nodes && strcmp(nodes, "0") == 0);
  uint32_t version = 0;
  cuptiGetVersion(&version);
  fprintf(g_out, "# parity-cupti %d\n# cupti_version %u\n# pid %ld\n# out %s\n", PARITY_CUPTI_FORMAT, version, (long)g_pid, path.c_str());
  bool ok = check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks") &&
            check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable CONCURRENT_KERNEL") &&
            check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable MEMCPY") &&
            check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable MEMSET") &&
            check(cuptiSubscribe(&g_subscriber, (CUpti_CallbackFunc)on_callback, nullptr), "cuptiSubscribe") &&
            check(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING), "resource callback") &&
            check(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED), "graph-exec callback") &&
            check(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch), "cuGraphLaunch callback") &&
            check(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz), "cuGraphLaunch_ptsz callback");
  // deliver full buffers at least every second, so the pool is recycled during long runs
  cuptiActivityFlushPeriod(1000);
  atexit(at_exit);
  fflush(g_out);
  return ok ? 1 : 0;
}
