package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/memfit/memfit/device/cuda"
)

// launchCounter is a device that counts its CUDA launches: the CUDA device
// on its emulator (build tag cudaemu).
type launchCounter interface {
	CountsLaunches() bool
	ResetLaunchCounts()
	LaunchCounts() cuda.LaunchCounts
}

// launchTable is -kernels' table on the CUDA emulator: per kernel, its
// launches and the bytes they read and write; per combination of GEMM
// types, the cuBLAS calls, multiply-adds and bytes; the copies.
type launchTable struct {
	rows []launchRow
}

type launchRow struct {
	what           string
	calls, blocks  int64
	fmas           int64
	read, written  int64
	accesses       int64
	kernel, isGemm bool
}

func newLaunchTable(c cuda.LaunchCounts) *launchTable {
	t := &launchTable{}
	for _, k := range c.Kernels {
		t.rows = append(t.rows, launchRow{what: k.Name, calls: k.Launches, blocks: k.Blocks, read: k.ReadBytes, written: k.WriteBytes, accesses: k.Accesses, kernel: true})
	}
	for _, g := range c.Gemms {
		t.rows = append(t.rows, launchRow{what: fmt.Sprintf("gemm %v,%v->%v compute %s", g.A, g.B, g.C, g.Compute), calls: g.Calls, fmas: g.FMAs, read: g.ReadBytes, written: g.WriteBytes, isGemm: true})
	}
	for _, k := range c.Copies {
		r := launchRow{what: "copy " + k.Kind, calls: k.Calls}
		switch k.Kind {
		case "DtoH":
			r.read = k.Bytes
		case "DtoD":
			r.read, r.written = k.Bytes, k.Bytes
		default:
			r.written = k.Bytes
		}
		t.rows = append(t.rows, r)
	}
	sort.SliceStable(t.rows, func(i, j int) bool {
		a, b := t.rows[i], t.rows[j]
		if a.read+a.written != b.read+b.written {
			return a.read+a.written > b.read+b.written
		}
		return a.what < b.what
	})
	return t
}

// report writes the table per step: every count divided by steps (a step
// issues the same work each time, so the division is exact).
func (t *launchTable) report(w io.Writer, steps int) {
	s := int64(max(steps, 1))
	fmt.Fprintf(w, "%8s %8s %12s %12s %12s %12s  %s\n", "calls", "blocks", "read B", "written B", "accesses", "MFMA", "kernel")
	var launches, gemms, read, written int64
	for _, r := range t.rows {
		blocks, mfma := "", ""
		if r.kernel {
			blocks = fmt.Sprint(r.blocks / max(r.calls, 1))
			launches += r.calls
		}
		if r.isGemm {
			mfma = fmt.Sprintf("%.3f", float64(r.fmas)/float64(s)/1e6)
			gemms += r.calls
		}
		if r.kernel || r.isGemm {
			read += r.read
			written += r.written
		}
		acc := ""
		if r.kernel {
			acc = fmt.Sprint(r.accesses / s)
		}
		fmt.Fprintf(w, "%8d %8s %12d %12d %12s %12s  %s\n", r.calls/s, blocks, r.read/s, r.written/s, acc, mfma, r.what)
	}
	fmt.Fprintf(w, "per step: %d kernel launches, %d GEMMs; kernels and GEMMs read %d and write %d bytes (distinct 32-byte sectors per call)\n",
		launches/s, gemms/s, read/s, written/s)
}
