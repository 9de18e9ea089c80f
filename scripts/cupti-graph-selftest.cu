// A CUDA-graph workload for checking parity's CUPTI tracer on a GPU without llama.cpp: K kernels
// captured into a graph, instantiated once, launched M times (a few eager kernels around them),
// so the trace must hold M launches of K kernels each, and enough records that CUPTI hands back
// many buffers while graphs are still being launched.  Prints the host time of the launch loop.
//   nvcc -O2 -arch=sm_90 -o graph-selftest scripts/cupti-graph-selftest.cu
//   graph-selftest K M
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

__global__ void step(float *x, int i) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  x[t] = x[t] * 0.999f + (float)i;
}

#define CHECK(call)                                                                     \
  do {                                                                                  \
    cudaError_t e = (call);                                                             \
    if (e != cudaSuccess) {                                                             \
      fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e));                 \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

int main(int argc, char **argv) {
  int k = argc > 1 ? atoi(argv[1]) : 100, m = argc > 2 ? atoi(argv[2]) : 2000;
  if (k <= 0 || m <= 0) {
    fprintf(stderr, "usage: graph-selftest KERNELS_PER_GRAPH LAUNCHES\n");
    return 2;
  }
  float *x;
  CHECK(cudaMalloc(&x, 256 * 32 * sizeof(float)));
  CHECK(cudaMemset(x, 0, 256 * 32 * sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  step<<<32, 256, 0, s>>>(x, -1);  // eager: before the graph
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < k; i++) step<<<32, 256, 0, s>>>(x, i);
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  CHECK(cudaStreamSynchronize(s));
  auto t0 = std::chrono::steady_clock::now();
  for (int j = 0; j < m; j++) CHECK(cudaGraphLaunch(ge, s));
  CHECK(cudaStreamSynchronize(s));
  auto t1 = std::chrono::steady_clock::now();
  step<<<32, 256, 0, s>>>(x, -2);  // eager: after
  CHECK(cudaStreamSynchronize(s));
  printf("graph-selftest kernels_per_graph %d launches %d loop_ms %.3f\n", k, m, std::chrono::duration<double, std::milli>(t1 - t0).count());
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(x));
  return 0;
}
