package train

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/memfit/memfit/memory"
)

// Record is one line of the metrics log: what happened at a step.
type Record struct {
	Step        int     `json:"step"`
	Epoch       int     `json:"epoch"`
	Loss        float64 `json:"loss"`
	LR          float64 `json:"lr"`
	GradNorm    float64 `json:"grad_norm"`
	LossScale   float64 `json:"loss_scale"`
	Skipped     int     `json:"skipped_steps"`
	SamplesPerS float64 `json:"samples_per_sec"`
	// TrainedTokens are the step's targets the loss is a mean over
	// (token tasks): with fine-tuning records, the answers' tokens.
	TrainedTokens int `json:"trained_tokens,omitempty"`
	// PaddingFraction is the share of the step's token positions that
	// are padding (fine-tuning records without -pack).
	PaddingFraction float64 `json:"padding_fraction,omitempty"`
	Accum           int     `json:"accum"`
	Allocated       int64   `json:"allocated"`
	Reserved        int64   `json:"reserved"`
	Peak            int64   `json:"peak"`
	// Peak bytes by category during the step.
	PeakByCategory map[string]int64 `json:"peak_by_category"`
	EvalLoss       *float64         `json:"eval_loss,omitempty"`
	EvalAccuracy   *float64         `json:"eval_accuracy,omitempty"`
}

// metricsLog writes Records as CSV or JSON Lines, chosen by the file's
// extension, flushing after every record so an interrupted run keeps its
// log.
type metricsLog struct {
	f    *os.File
	w    *bufio.Writer
	csv  *csv.Writer
	head bool
}

func openMetrics(path string) (*metricsLog, error) {
	if path == "" {
		return nil, nil
	}
	if !strings.HasSuffix(path, ".csv") && !strings.HasSuffix(path, ".jsonl") {
		return nil, fmt.Errorf("-metrics %s: want a .csv or .jsonl file", path)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-metrics: %v", err)
	}
	m := &metricsLog{f: f, w: bufio.NewWriter(f)}
	if strings.HasSuffix(path, ".csv") {
		m.csv = csv.NewWriter(m.w)
	}
	return m, nil
}

var csvHeader = []string{"step", "epoch", "loss", "lr", "grad_norm", "loss_scale", "skipped_steps", "samples_per_sec", "trained_tokens", "accum", "allocated", "reserved", "peak",
	"peak_parameter", "peak_gradient", "peak_optimizer_state", "peak_activation", "peak_temporary", "peak_data", "eval_loss", "eval_accuracy"}

func (m *metricsLog) write(r Record) error {
	if m == nil {
		return nil
	}
	if m.csv == nil {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		m.w.Write(append(b, '\n'))
		return m.w.Flush()
	}
	if !m.head {
		m.csv.Write(csvHeader)
		m.head = true
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	opt := func(v *float64) string {
		if v == nil {
			return ""
		}
		return f(*v)
	}
	row := []string{strconv.Itoa(r.Step), strconv.Itoa(r.Epoch), f(r.Loss), f(r.LR), f(r.GradNorm), f(r.LossScale), strconv.Itoa(r.Skipped), f(r.SamplesPerS), strconv.Itoa(r.TrainedTokens), strconv.Itoa(r.Accum),
		strconv.FormatInt(r.Allocated, 10), strconv.FormatInt(r.Reserved, 10), strconv.FormatInt(r.Peak, 10)}
	for _, c := range []memory.Category{memory.Parameter, memory.Gradient, memory.OptimizerState, memory.Activation, memory.Temporary, memory.Data} {
		row = append(row, strconv.FormatInt(r.PeakByCategory[c.String()], 10))
	}
	row = append(row, opt(r.EvalLoss), opt(r.EvalAccuracy))
	m.csv.Write(row)
	m.csv.Flush()
	if err := m.csv.Error(); err != nil {
		return err
	}
	return m.w.Flush()
}

func (m *metricsLog) close() error {
	if m == nil {
		return nil
	}
	m.w.Flush()
	return m.f.Close()
}

// Summary is the -summary JSON: other tools read these keys.
type Summary struct {
	Steps         int       `json:"steps"`
	FinalLoss     float64   `json:"final_loss"`
	Eval          EvalStats `json:"eval"`
	SamplesPerSec float64   `json:"samples_per_sec"`
	PeakBytes     PeakBytes `json:"peak_bytes"`
	// PeakRSSBytes is the process's peak resident set (VmHWM) when the
	// summary was made, beside the allocator's peaks: what the operating
	// system saw, Go runtime, binary and host batches included. 0 where
	// the system does not say.
	PeakRSSBytes int64  `json:"peak_rss_bytes"`
	Config       Config `json:"config"`
	OOMRetries   int    `json:"oom_retries"`
	SkippedSteps int    `json:"skipped_steps"`
	// TrainedTokens are the targets the losses were means over, over
	// the run (token tasks; every rank's).
	TrainedTokens int64 `json:"trained_tokens,omitempty"`
	// TokensPerSec is TrainedTokens per second of training.
	TokensPerSec float64 `json:"tokens_per_sec,omitempty"`
	// PaddingFraction is the mean over the steps of their share of
	// token positions that were padding.
	PaddingFraction float64 `json:"padding_fraction,omitempty"`
	Checkpoint      string  `json:"checkpoint,omitempty"`
	// Zero3 is where a -zero 3 rank's collectives went, absent otherwise.
	Zero3 *Zero3Stats `json:"zero3,omitempty"`
}

// Zero3Stats are a ZeRO-3 rank's gathers and reductions over the run
// (parallel.ZeRO3's counters). GatherWaitSec is the part of GatherSec the
// training waited for: all of it without -zero-prefetch; the difference
// is the gathering that overlapped computation.
type Zero3Stats struct {
	Gathers       int     `json:"gathers"`
	Prefetches    int     `json:"prefetches"`
	Kept          int     `json:"kept"`
	Reductions    int     `json:"reductions"`
	GatherSec     float64 `json:"gather_sec"`
	GatherWaitSec float64 `json:"gather_wait_sec"`
	ReduceSec     float64 `json:"reduce_sec"`
}

// EvalStats is the last evaluation's result.
type EvalStats struct {
	Loss     float64  `json:"loss"`
	Accuracy *float64 `json:"accuracy,omitempty"`
	// Perplexity is exp(Loss) for token tasks: the loss is the mean
	// over the held-out split's trained tokens, Tokens of them.
	Perplexity *float64 `json:"perplexity,omitempty"`
	Tokens     int      `json:"tokens,omitempty"`
	// Examples is how many held-out examples the loss is over: 0 when
	// there were none (-val-split 0), and Loss means nothing.
	Examples int `json:"examples"`
}

// PeakBytes are the allocator's peaks over the run, in bytes: Total and
// the categories count requested bytes, Reserved the segments held from
// the device (what the process holds for tensors, cache included).
type PeakBytes struct {
	Total          int64 `json:"total"`
	Reserved       int64 `json:"reserved"`
	Parameter      int64 `json:"parameter"`
	Gradient       int64 `json:"gradient"`
	OptimizerState int64 `json:"optimizer_state"`
	Activation     int64 `json:"activation"`
	Temporary      int64 `json:"temporary"`
	Data           int64 `json:"data"`
	KVCache        int64 `json:"kv_cache,omitempty"` // generation's key/value cache
	// Host memory with -offload: the host allocator's peaks (all its
	// bytes are offloaded state), absent otherwise.
	HostTotal          int64 `json:"host_total,omitempty"`
	HostParameter      int64 `json:"host_parameter,omitempty"` // master weights
	HostGradient       int64 `json:"host_gradient,omitempty"`
	HostOptimizerState int64 `json:"host_optimizer_state,omitempty"`
	HostActivation     int64 `json:"host_activation,omitempty"`
	// ModelState is the peak of parameters + gradients + optimizer state
	// at one moment (ZeRO's "model states"): less than the sum of their
	// own peaks when they peak apart, as under ZeRO-3, where a block is
	// whole while its gradient is, but not while the optimizer steps.
	ModelState int64 `json:"model_state"`
}

func peakBytes(st memory.Stats) PeakBytes {
	return PeakBytes{
		Total:          st.Requested.Peak,
		Reserved:       st.Reserved.Peak,
		Parameter:      st.Category(memory.Parameter).Peak,
		Gradient:       st.Category(memory.Gradient).Peak,
		OptimizerState: st.Category(memory.OptimizerState).Peak,
		Activation:     st.Category(memory.Activation).Peak,
		Temporary:      st.Category(memory.Temporary).Peak,
		Data:           st.Category(memory.Data).Peak,
		KVCache:        st.Category(memory.KVCache).Peak,
	}
}
