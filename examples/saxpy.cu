// The CUDA form of examples/saxpy_vars.json's kernel: one thread per element.
// saxpy.ptx is this file compiled once with the CUDA toolkit:
//   nvcc -ptx -arch=compute_75 -O3 -o saxpy.ptx saxpy.cu, then .version lowered to 7.0 with
//   svod_min.devices.cuda.rewrite_ptx_version (nvcc 13 stamps 9.0, which CUDA 12 drivers refuse).
// (compute_75 and PTX ISA 7.x load on any CUDA 11+ driver; the driver JIT-compiles for the GPU it finds).
extern "C" __global__ void saxpy(float *__restrict__ y, const float *__restrict__ x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + y[i];
}
