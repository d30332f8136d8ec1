package layering

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/memfit/memfit"

// rank orders the strata: a package may import only packages of a lower
// rank (or its own sub-packages, or the same rank where listed in peers).
var rank = map[string]int{
	"memory":            0,
	"safetensors":       0,
	"device":            1,
	"device/cpu/gemm":   1,
	"device/cpu":        2,
	"device/meta":       2,
	"device/cuda":       2,
	"tensor":            3,
	"nn":                4,
	"models":            5,
	"optim":             5,
	"data":              5,
	"tokenizer":         5,
	"amp":               5,
	"checkpoint":        5,
	"accumulate":        5,
	"freeze":            5,
	"offload":           5,
	"tile":              5,
	"parallel":          6,
	"hf":                6,
	"lora":              6,
	"train":             7,
	"cmd/train":         8,
	"internal/layering": 9,
}

// rankOf maps an import path to its stratum, or -1 for paths outside the
// table (internal helpers, commands other than train).
func rankOf(path string) (string, int) {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
	best, r := "", -1
	for p, v := range rank {
		if (rel == p || strings.HasPrefix(rel, p+"/")) && len(p) > len(best) {
			best, r = p, v
		}
	}
	return best, r
}

func TestNoUpwardImports(t *testing.T) {
	for _, tags := range []string{"", "cuda", "cudaemu", "mpi"} {
		out, err := exec.Command("go", "list", "-tags", tags, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
		if err != nil {
			t.Fatalf("go list (tags %q): %v", tags, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			pkg, imports := fields[0], fields[1:]
			name, r := rankOf(pkg)
			for _, imp := range imports {
				if strings.HasPrefix(imp, "gorgonia.org/cu") && name != "device/cuda" {
					t.Errorf("%s imports %s: only device/cuda may (tags %q)", pkg, imp, tags)
				}
				if !strings.HasPrefix(imp, module) || r < 0 {
					continue
				}
				iname, ir := rankOf(imp)
				if ir < 0 || iname == name {
					continue
				}
				if ir >= r {
					t.Errorf("%s (%s, rank %d) imports %s (%s, rank %d): imports must point down", pkg, name, r, imp, iname, ir)
				}
			}
		}
	}
}
