// Command stepbench times memfit training steps for the reference
// configurations of ../shared/peers/torch_bench.py (the PyTorch CPU peer),
// so that scripts/bench-vs-torch.sh can print memfit/PyTorch ratios
// measured in one run. It prints one JSON object per configuration: the
// median step time over the timed steps and the allocator's peaks.
//
//	go run ./cmd/stepbench -configs mlp_fp32,gpt_fp32,gpt_bf16 -steps 10
package main
