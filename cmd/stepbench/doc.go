// Command stepbench times memfit training steps for the reference
// configurations of ../shared/peers/torch_bench.py (the PyTorch CPU peer)
// and scripts/torch_gpu_ref.py (the GPU one), so that
// scripts/bench-vs-torch.sh and scripts/gpu-run.sh can print
// memfit/PyTorch ratios measured in one run. It prints one JSON object per
// configuration: the median step time over the timed steps and the
// allocator's peaks.
//
//	go run ./cmd/stepbench -configs mlp_fp32,gpt_fp32,gpt_bf16 -steps 10
//
// -with adds train flags to every configuration (-with "-layers 2
// -context 64" for small shapes). -kernels prints, per timed step, each
// kernel's wall time; on a GPU (-device cuda in a build with -tags cuda)
// the GPU's own time in each kernel, cuBLAS product and copy, from timing
// events around each (cuda.Device.StartProfile), summed into the groups
// an 8B QLoRA step's profile needs (dequantization, LoRA's and the base's
// products, attention forward and backward, copies on each stream, other
// kernels, and the compute stream idle while the GPU waits for the host),
// with the host's time blocked on the GPU by call and the longest
// operations; on the CUDA emulator (a build with -tags cudaemu,
// -device cuda) it prints instead what the emulator counted: each CUDA
// kernel's launches, blocks, global-memory accesses and the bytes it read
// and wrote (distinct 32-byte sectors per launch), the cuBLAS GEMMs by
// types with their multiply-adds and bytes, and the copies, so that a
// kernel change's effect on launches and traffic shows without a GPU:
//
//	go run -tags cudaemu ./cmd/stepbench -device cuda -kernels -configs gpt_bf16 \
//	    -with "-layers 1 -batch 2" -steps 1 -warmup 1
package main
