//go:build cudaemu

package cuda

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// mutants are deliberately broken variants of real kernels in kernels.cu,
// each one edit of the source: the emulated conformance suite must fail on
// every one of them, which is what shows that it (and the emulator under
// it) would catch such a bug in a new kernel.
var mutants = []struct {
	name     string
	old, new string
	want     string // in the failing suite's output
	run      string // the tests that must fail (default: the conformance suite)
}{
	{
		name: "k_quant_nf4 pads an odd count with code 0, not the code of 0",
		old:  "int c[2] = {7, 7};",
		new:  "int c[2] = {0, 0};",
		want: "--- FAIL",
		run:  "^TestQuantKernels$",
	},
	{
		name: "k_quant_int8 truncates instead of rounding to nearest",
		old:  "float y = rintf(__fmul_rn(ld<float>(src, i), r));",
		new:  "float y = truncf(__fmul_rn(ld<float>(src, i), r));",
		want: "--- FAIL",
		run:  "^TestQuantKernels$",
	},
	{
		name: "softmax writes one element past each row",
		old:  "for (i64 i = threadIdx.x; i < n; i += blockDim.x) st<T>(dst, base + i, xexp(",
		new:  "for (i64 i = threadIdx.x; i <= n; i += blockDim.x) st<T>(dst, base + i, xexp(",
		want: "CUDA_ERROR_ILLEGAL_ADDRESS",
	},
	{
		name: "block_reduce reads shared memory without the barrier after the writes",
		old:  "    if (lane == 0) sh[w] = v;\n    __syncthreads();\n",
		new:  "    if (lane == 0) sh[w] = v;\n",
		want: "--- FAIL",
	},
	{
		name: "block_reduce shuffles from the wrong lane",
		old:  "v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, off));",
		new:  "v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, off ^ 1));",
		want: "--- FAIL",
	},
	{
		name: "fused attention normalises rows before every score is written",
		old:  "                P_(r, j) = s;\n            }\n            __syncthreads();\n",
		new:  "                P_(r, j) = s;\n            }\n",
		want: "--- FAIL",
	},
	{
		name: "8-bit Adam quantizes the second moment with the first moment's factor",
		old:  "q8_unsigned(__fmul_rn(vw[k], kv))",
		new:  "q8_unsigned(__fmul_rn(vw[k], km))",
		want: "--- FAIL",
	},
	{
		name: "multi-tensor Adam runs a tensor's last chunk past its end",
		old:  "const i64 end = first + ADAM_CHUNK < t.n[lo] ? first + ADAM_CHUNK : t.n[lo];",
		new:  "const i64 end = first + ADAM_CHUNK;",
		want: "CUDA_ERROR_ILLEGAL_ADDRESS",
	},
	{
		name: "multi-tensor Adam gives a block the tensor before its own",
		old:  "if (t.start[mid] <= b) lo = mid;",
		new:  "if (t.start[mid] < b) lo = mid;",
		want: "--- FAIL",
	},
	{
		name: "tiled attention forgets to rescale a row's sum when its maximum grows",
		old:  "                lrow[a] = lrow[a] * alpha + half_sum(sum);\n                mrow[a] = mn;\n                for (int c = 0; c < DK; c++)",
		new:  "                lrow[a] = lrow[a] + half_sum(sum);\n                mrow[a] = mn;\n                for (int c = 0; c < DK; c++)",
		want: "--- FAIL",
	},
	{
		name: "tiled attention loads the values while threads still read the keys",
		old:  "            __syncthreads();  // Pt is written; every thread is done reading the keys\n",
		new:  "",
		want: "--- FAIL",
		// The emulator's f32 path reads its keys before the shuffles that
		// let other warps run; 16-bit heads, on CUDA cores where the GPU
		// has no tensor cores, read them again after.
		run: "^TestAttentionTensorCores$",
	},
	{
		name: "tiled attention lets a query see itself no more (the diagonal masked)",
		old:  "s[a][c] = (i < Tn && j <= i && j >= start[a])",
		new:  "s[a][c] = (i < Tn && j < i && j >= start[a])",
		want: "--- FAIL",
	},
	{
		name: "k_flash_bwd_kv leaves the scale out of dk",
		old:  "st<float>(dk, head_el(sdk, b, hk, j, d), scale * gk[a][e]);",
		new:  "st<float>(dk, head_el(sdk, b, hk, j, d), gk[a][e]);",
		want: "--- FAIL",
	},
	{
		name: "k_flash_bwd_q reads a key tile before it is loaded",
		old:  "            fa_load<BC, DM, L1>(Vs, v, sv, b, hk, j0, Tn, D);\n            __syncthreads();\n            float s[RM][CM], dp[RM][CM];\n            fa_scores_grads<RM, CM, DM, L1, L1>",
		new:  "            fa_load<BC, DM, L1>(Vs, v, sv, b, hk, j0, Tn, D);\n            float s[RM][CM], dp[RM][CM];\n            fa_scores_grads<RM, CM, DM, L1, L1>",
		want: "--- FAIL",
	},
	{
		name: "k_flash_fwd_tc forgets to rescale a row's sum when its maximum grows",
		old:  "                        lrow[r] = lrow[r] * alpha + quad_sum(sum);",
		new:  "                        lrow[r] = lrow[r] + quad_sum(sum);",
		want: "--- FAIL",
	},
	{
		name: "k_flash_bwd_q_tc multiplies by a value tile before it is loaded",
		old:  "            tc_load<BC, DM>(Vs, v, sv, b, hk, j0, Tn, D);\n            __syncthreads();\n            const int nlive = tc_cols(j0, last, NT);\n            float s[NT][4], dp[NT][4];",
		new:  "            tc_load<BC, DM>(Vs, v, sv, b, hk, j0, Tn, D);\n            const int nlive = tc_cols(j0, last, NT);\n            float s[NT][4], dp[NT][4];",
		want: "--- FAIL",
	},
	{
		name: "k_flash_bwd_kv_tc skips a query tile that sees the warp's first key",
		old:  "            int lo = c0 > i0 ? (int)((c0 - i0) / 8) : 0, hi = tc_cols(i0, Tn - 1, NT);",
		new:  "            int lo = c0 > i0 ? (int)((c0 - i0) / 8) + 1 : 0, hi = tc_cols(i0, Tn - 1, NT);",
		want: "--- FAIL",
	},
	{
		name: "k_flash_bwd_kv computes the row statistics of every query tile past a window's end",
		old:  "                if (att_start(seg, b, Tn, i0) > j0 + BC - 1) break;\n                __syncthreads();\n                fa_row_stats<BR, DM>(lse_s, start_s, delta_s, lse, seg, dout, sdo, out, so, bh, b, h, i0, Tn, D);\n                __syncthreads();\n",
		new:  "                __syncthreads();\n                fa_row_stats<BR, DM>(lse_s, start_s, delta_s, lse, seg, dout, sdo, out, so, bh, b, h, i0, Tn, D);\n                __syncthreads();\n                if (att_start(seg, b, Tn, i0) > j0 + BC - 1) continue;\n",
		want: "--- FAIL",
		run:  "^TestAttentionWindowCost$",
	},
	{
		name: "k_flash_bwd_kv_tc runs every query tile past a window's end",
		old:  "if (att_start(seg, b, Tn, i0) > j0 + BC - 1) break;\n                __syncthreads();  // the last tile's",
		new:  "__syncthreads();  // the last tile's",
		want: "--- FAIL",
		run:  "^TestAttentionWindowCost$",
	},
	{
		name: "tiled attention leaves the soft cap out of its scores",
		old:  "return c == 0 ? x : c * xtanh(x / c);",
		new:  "return x;",
		want: "--- FAIL",
		run:  "^TestConformance$/^AttentionWindow/",
	},
	{
		name: "the tiled kernels' backward leaves out the soft cap's derivative",
		old:  "    *dc = 1 - t * t;\n    return xexp(c * t - l);",
		new:  "    *dc = 1;\n    return xexp(c * t - l);",
		want: "--- FAIL",
		run:  "^TestConformance$/^AttentionWindow/",
	},
	{
		name: "the slot kernels' backward leaves out the soft cap's derivative",
		old:  "                    if (softcap > 0) ds *= dc;\n",
		new:  "",
		want: "--- FAIL",
		run:  "^TestConformance$/^AttentionWindow/",
	},
	{
		name: "k_flash_fwd reads key head h % KV for query head h (heads interleaved, not grouped)",
		old:  "const i64 b = bh / H, h = bh % H, hk = att_kv_head(h, H, KV), m = Tn - i0 < BR ? Tn - i0 : BR;\n        __syncthreads();  // the previous tile's",
		new:  "const i64 b = bh / H, h = bh % H, hk = h % KV, m = Tn - i0 < BR ? Tn - i0 : BR;\n        __syncthreads();  // the previous tile's",
		want: "--- FAIL",
		run:  "^TestConformance$/^AttentionGrouped/",
	},
	{
		name: "k_flash_bwd_kv sums only the first query head of each group",
		old:  "        for (i64 h = hk * G, bh = b * H + h; h < (hk + 1) * G; h++, bh++) {\n            for (i64 i0 = j0 / BR * BR; i0 < Tn; i0 += BR) {\n                // Starts never decrease along a row: a tile whose first row\n                // starts after the key tile's last key sees none of it, and\n                // neither does any tile after it (a window's end).\n                if (att_start(seg, b, Tn, i0) > j0 + BC - 1) break;\n                __syncthreads();\n                fa_row_stats",
		new:  "        for (i64 h = hk * G, bh = b * H + h; h < hk * G + 1; h++, bh++) {\n            for (i64 i0 = j0 / BR * BR; i0 < Tn; i0 += BR) {\n                // Starts never decrease along a row: a tile whose first row\n                // starts after the key tile's last key sees none of it, and\n                // neither does any tile after it (a window's end).\n                if (att_start(seg, b, Tn, i0) > j0 + BC - 1) break;\n                __syncthreads();\n                fa_row_stats",
		want: "--- FAIL",
		run:  "^TestConformance$/^AttentionGrouped/",
	},
	{
		name: "k_flash_bwd_kv_tc draws the dropout masks of the key head, not the query head",
		old:  "        for (i64 h = hk * G, bh = b * H + h; h < (hk + 1) * G; h++, bh++) {\n            for (i64 i0 = j0 / BR * BR; i0 < Tn; i0 += BR) {\n                // Starts never decrease along a row: a tile whose first row\n                // starts after the key tile's last key sees none of it, and\n                // neither does any tile after it (a window's end).\n                if (att_start(seg, b, Tn, i0) > j0 + BC - 1) break;\n                __syncthreads();  // the last tile's",
		new:  "        for (i64 h = hk * G, bh = b * H + hk; h < (hk + 1) * G; h++) {\n            for (i64 i0 = j0 / BR * BR; i0 < Tn; i0 += BR) {\n                // Starts never decrease along a row: a tile whose first row\n                // starts after the key tile's last key sees none of it, and\n                // neither does any tile after it (a window's end).\n                if (att_start(seg, b, Tn, i0) > j0 + BC - 1) break;\n                __syncthreads();  // the last tile's",
		want: "--- FAIL",
		run:  "^TestConformance$/^AttentionGrouped/",
	},
	{
		name: "k_flash_bwd_q_tc reads the values of the query head's index",
		old:  "            tc_load<BC, DM>(Vs, v, sv, b, hk, j0, Tn, D);\n            __syncthreads();\n            const int nlive",
		new:  "            tc_load<BC, DM>(Vs, v, sv, b, h % KV, j0, Tn, D);\n            __syncthreads();\n            const int nlive",
		want: "--- FAIL",
		run:  "^TestConformance$/^AttentionGrouped/",
	},
	{
		name: "k_attention_bwd clears a group's dk and dv before each query head",
		old:  "        for (i64 e = threadIdx.x; e < 2 * Tn * D; e += blockDim.x) W_(oK + e) = 0;\n        __syncthreads();\n        for (i64 h = hk * G; h < (hk + 1) * G; h++) {\n            const i64 bh = b * H + h;\n",
		new:  "        for (i64 h = hk * G; h < (hk + 1) * G; h++) {\n            const i64 bh = b * H + h;\n            for (i64 e = threadIdx.x; e < 2 * Tn * D; e += blockDim.x) W_(oK + e) = 0;\n            __syncthreads();\n",
		want: "--- FAIL",
		run:  "^TestConformance$/^AttentionGrouped/",
	},
	{
		name: "mma_16816 multiplies bf16 fragments as f16",
		old:  "    memfit_mma_m16n8k16(bf16 ? MEMFIT_MMA_BF16 : MEMFIT_MMA_F16, d, a, b, c);",
		new:  "    memfit_mma_m16n8k16(MEMFIT_MMA_F16, d, a, b, c);",
		want: "--- FAIL",
	},
	{
		name: "k_reduce_cols combines the warps' partial results before they are all written",
		old:  "        sh[threadIdx.x] = acc;\n        __syncthreads();\n",
		new:  "        sh[threadIdx.x] = acc;\n",
		want: "--- FAIL",
		run:  "^TestReducePaths$",
	},
	{
		name: "k_layernorm_bwd_param leaves out the last warp's rows",
		old:  "for (int k = 1; k < nw; k++) {\n                dg += shg[k * COLS + lane];",
		new:  "for (int k = 1; k < nw - 1; k++) {\n                dg += shg[k * COLS + lane];",
		want: "--- FAIL",
		run:  "^TestLayerNormBackwardParams$",
	},
	{
		name: "k_reduce_cols_combine leaves out the last slice",
		old:  "for (i64 s = 1; s < slices; s++) acc = combine(",
		new:  "for (i64 s = 1; s < slices - 1; s++) acc = combine(",
		want: "--- FAIL",
		run:  "^TestReducePaths$",
	},
	{
		name: "k_reduce_cols_combine adds the slices last first",
		old:  "T acc = (T)GMEM(const T, part, o);\n        for (i64 s = 1; s < slices; s++)",
		new:  "T acc = (T)GMEM(const T, part, (slices - 1) * r.nout + o);\n        for (i64 s = slices - 2; s >= 0; s--)",
		want: "--- FAIL",
		run:  "^TestReduceColsOrder$",
	},
	{
		name: "a slice of a column reduction stops one row short",
		old:  "*hi = *lo + chunk < nred ? *lo + chunk : nred;",
		new:  "*hi = *lo + chunk - 1 < nred ? *lo + chunk - 1 : nred;",
		want: "--- FAIL",
		run:  "^TestLayerNormBackwardParams$",
	},
	{
		name: "k_layernorm_bwd_param_combine leaves out dbeta's first slice",
		old:  "T db = (T)GMEM(const T, part, slices * n + i);",
		new:  "T db = 0;",
		want: "--- FAIL",
		run:  "^TestLayerNormBackwardParams$",
	},
	{
		name: "the grid-stride loop runs one index too far",
		old:  "i < (n); i += (i64)blockDim.x * gridDim.x)",
		new:  "i <= (n); i += (i64)blockDim.x * gridDim.x)",
		want: "CUDA_ERROR_ILLEGAL_ADDRESS",
	},
}

// mutantEnv names the mutant a child test binary runs the suite on.
const mutantEnv = "MEMFIT_CUDAEMU_MUTANT"

func init() {
	name := os.Getenv(mutantEnv)
	if name == "" {
		return
	}
	for _, m := range mutants {
		if m.name == name {
			kernelsCU = strings.Replace(kernelsCU, m.old, m.new, 1)
			return
		}
	}
	panic("no mutant " + name)
}

// TestMutantsFail runs the conformance suite on each mutant, in a child
// process (a broken kernel may panic the device), and requires it to fail.
func TestMutantsFail(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		t.Skip("this is a mutant's run")
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			if n := strings.Count(kernelsCU, m.old); n != 1 {
				t.Fatalf("kernels.cu holds the mutated text %d times, want once: update the mutant", n)
			}
			run := m.run
			if run == "" {
				run = "^TestConformance$"
			}
			cmd := exec.Command(os.Args[0], "-test.run", run, "-test.count", "1")
			cmd.Env = append(os.Environ(), mutantEnv+"="+m.name, "MEMFIT_CUDAEMU_CACHE="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the conformance suite passes on the mutant:\n%s", tail(out))
			}
			if !strings.Contains(string(out), m.want) {
				t.Errorf("the suite failed, but without %q:\n%s", m.want, tail(out))
			}
			t.Logf("caught: %s", firstFailure(out))
		})
	}
}

func tail(out []byte) string {
	s := string(out)
	if len(s) > 3000 {
		s = "..." + s[len(s)-3000:]
	}
	return s
}

// firstFailure is the first line saying what went wrong: a panic, or a
// comparison of the suite.
func firstFailure(out []byte) string {
	lines := strings.Split(string(out), "\n")
	for _, prefix := range []string{"panic:", "devicetest.go:", "window.go:", "grouped.go:", "reduce_test.go:", "flash_test.go:", "window_test.go:"} {
		for _, l := range lines {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, prefix) {
				return l
			}
		}
	}
	return ""
}
