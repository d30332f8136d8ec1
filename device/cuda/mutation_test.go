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
}{
	{
		name: "softmax writes one element past each row",
		old:  "for (i64 i = threadIdx.x; i < n; i += blockDim.x)\n                st<T>(dst, base + i, (T)((double)xexp(",
		new:  "for (i64 i = threadIdx.x; i <= n; i += blockDim.x)\n                st<T>(dst, base + i, (T)((double)xexp(",
		want: "CUDA_ERROR_ILLEGAL_ADDRESS",
	},
	{
		name: "block_reduce reads shared memory without the barrier after the writes",
		old:  "    sh[threadIdx.x] = v;\n    __syncthreads();\n",
		new:  "    sh[threadIdx.x] = v;\n",
		want: "--- FAIL",
	},
	{
		name: "block_reduce shuffles from the wrong lane",
		old:  "__shfl_down_sync(0xffffffffu, w, off)",
		new:  "__shfl_down_sync(0xffffffffu, w, off + 1)",
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
			cmd := exec.Command(os.Args[0], "-test.run", "^TestConformance$", "-test.count", "1")
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
	for _, prefix := range []string{"panic:", "devicetest.go:"} {
		for _, l := range lines {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, prefix) {
				return l
			}
		}
	}
	return ""
}
