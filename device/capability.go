package device

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// Capabilities are the optional, fused kernels a device may have beyond
// Kernels. Each is a small interface found by type assertion, as gonum's
// mat finds a RawMatrixer: callers go through the package-level function
// of the same name (Softmax, LayerNorm, ...), which calls the device's own
// kernel when it has one and otherwise runs a composition of core kernels
// (composed.go) whose temporaries it takes from the device's allocator
// under memory.Temporary, so a device without the fused kernel computes
// the same values (within float tolerance) and its memory is accounted as
// honestly as anything else.
//
// Adding a capability: an interface here (its name in Capabilities and
// capabilityTypes), its composed fallback and the package-level function
// that chooses between them, the kernel in each device that has it, and
// a case in device/devicetest (which checks the kernel and the fallback
// against its float64 reference).

// SoftmaxKernels normalise the last dimension of contiguous rows.
type SoftmaxKernels interface {
	// Softmax writes softmax (log-softmax when log is set) of src's rows.
	Softmax(dst, src View, log bool)
	// SoftmaxBackward writes dx given y, the forward's result, and dy.
	SoftmaxBackward(dx, y, dy View, log bool)
}

// LayerNormKernels normalise the last dimension of contiguous rows.
type LayerNormKernels interface {
	// LayerNorm normalises the last dimension: y = (x-mean)·rstd·gamma +
	// beta; mean and rstd (one per row, F32, or F64 for F64 x) are
	// written for backward. Unless xc is the zero View, x is also
	// written to xc (contiguous, x's shape) in xc's dtype, rounded as
	// Copy rounds it: autocast's 16-bit copy of an F32 input saved for
	// backward, made by the pass that reads x anyway.
	LayerNorm(y, xc, mean, rstd, x, gamma, beta View, eps float64)
	// LayerNormBackward writes dx and accumulates into dgamma and dbeta.
	LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma View)
}

// CrossEntropyKernels compute softmax cross-entropy against integer
// targets without materialising the probabilities.
type CrossEntropyKernels interface {
	// CrossEntropy writes one loss per row of logits (rows×classes) for
	// integer targets; rows whose target equals ignore get 0. A target
	// outside [0, classes) other than ignore panics with *IndexError.
	CrossEntropy(loss, logits, targets View, ignore int, smoothing float64)
	// CrossEntropyBackward writes dlogits given one upstream gradient per
	// row.
	CrossEntropyBackward(dlogits, logits, targets, dloss View, ignore int, smoothing float64)
}

// CausalFiller masks attention scores without a mask tensor.
type CausalFiller interface {
	// CausalFill writes dst = src with value above the diagonal of the
	// last two dimensions.
	CausalFill(dst, src View, value float64)
}

// AdamStepper updates a parameter and its Adam state in one pass.
type AdamStepper interface {
	// AdamStep updates param, m and v in place from grad (all contiguous,
	// same length; grad may be any float dtype, the rest F32).
	AdamStep(param, grad, m, v View, h AdamHyper)
}

// AdamGroupStepper updates many parameters and their Adam state with one
// set of hyperparameters in a few passes (a GPU launches one kernel for a
// table of tensors rather than one per parameter: a model's many small
// biases and norms cost a launch each otherwise).
type AdamGroupStepper interface {
	// AdamSteps is AdamStep(params[i], grads[i], ms[i], vs[i], h) for
	// every i, with the same bits; the slices have one length and the
	// tensors do not overlap.
	AdamSteps(params, grads, ms, vs []View, h AdamHyper)
}

// Adam8bitStepper updates a parameter and its 8-bit Adam state (quant8.go)
// in one pass.
type Adam8bitStepper interface {
	// Adam8bitStep updates param (F32) in place from grad (F32) and the
	// moments held as codes m and v (U8, one per element) with scales
	// mScale and vScale (F32, one per Quant8Block elements), as
	// Adam8bitBlock does block by block; all contiguous.
	Adam8bitStep(param, grad, m, v, mScale, vScale View, h AdamHyper)
}

// SGDStepper updates a parameter and its momentum buffer in one pass.
type SGDStepper interface {
	// SGDStep updates param (and the momentum buffer, when h.Momentum is
	// non-zero) in place from grad.
	SGDStep(param, grad, momentum View, h SGDHyper)
}

// Capability names, for Has and Without.
const (
	CapSoftmax       = "softmax"
	CapLayerNorm     = "layer_norm"
	CapCrossEntropy  = "cross_entropy"
	CapCausalFill    = "causal_fill"
	CapAdamStep      = "adam_step"
	CapAdamGroupStep = "adam_group_step"
	CapSGDStep       = "sgd_step"
	CapAdam8bitStep  = "adam8bit_step"
)

// Capabilities lists every capability name.
var Capabilities = []string{CapSoftmax, CapLayerNorm, CapCrossEntropy, CapCausalFill, CapAdamStep, CapAdamGroupStep, CapSGDStep, CapAttention, CapTiledAttention, CapAdam8bitStep, CapStochasticRound, CapQuantGemm, CapDequantize}

// AttentionOf returns d's fused attention kernels, or nil when d lacks
// them (or hides them): the tensor package then composes attention from
// other ops.
func AttentionOf(d Device) AttentionKernels {
	k, _ := capable(d, CapAttention).(AttentionKernels)
	return k
}

// capabilityTypes maps each capability name to its interface.
var capabilityTypes = map[string]reflect.Type{
	CapSoftmax:         reflect.TypeFor[SoftmaxKernels](),
	CapLayerNorm:       reflect.TypeFor[LayerNormKernels](),
	CapCrossEntropy:    reflect.TypeFor[CrossEntropyKernels](),
	CapCausalFill:      reflect.TypeFor[CausalFiller](),
	CapAdamStep:        reflect.TypeFor[AdamStepper](),
	CapAdamGroupStep:   reflect.TypeFor[AdamGroupStepper](),
	CapSGDStep:         reflect.TypeFor[SGDStepper](),
	CapAdam8bitStep:    reflect.TypeFor[Adam8bitStepper](),
	CapStochasticRound: reflect.TypeFor[StochasticRounder](),
	CapAttention:       reflect.TypeFor[AttentionKernels](),
	CapTiledAttention:  reflect.TypeFor[TiledAttention](),
	CapQuantGemm:       reflect.TypeFor[QuantGemmer](),
	CapDequantize:      reflect.TypeFor[Dequantizer](),
}

// Has reports whether d has the fused kernels of capability name (and
// does not hide them: see Without).
func Has(d Device, name string) bool {
	c, t := capable(d, name), capabilityTypes[name]
	return c != nil && t != nil && reflect.TypeOf(c).Implements(t)
}

// Without returns d with the named capabilities hidden (all of them when
// none are named): the package-level functions then run their composed
// fallbacks on it. It is how the conformance suite checks each fallback
// against the fused kernel, and how a fused kernel suspected of a bug is
// taken out of a run.
//
// Only those capabilities are hidden: the result's Unwrap returns d, and
// As finds d's other interfaces (HostMemory) and d itself (the concrete
// device) through it, as errors.As finds an error inside another.
func Without(d Device, names ...string) Device {
	if len(names) == 0 {
		names = Capabilities
	}
	hidden := map[string]bool{}
	if w, ok := d.(*without); ok {
		d = w.Device
		for n := range w.hidden {
			hidden[n] = true
		}
	}
	for _, n := range names {
		hidden[n] = true
	}
	return &without{Device: d, hidden: hidden}
}

// without exposes a device's core alone (its embedded interface has no
// capability methods), remembering which capabilities it hides so that
// the functions below can still reach the others.
type without struct {
	Device
	hidden  map[string]bool
	answers sync.Map // reflect.Type → bool: hides' answers, asked at every op of a plan
}

// Name says which capabilities the view hides, so that test failures and
// out-of-memory messages tell the composed path from the fused one.
func (w *without) Name() string {
	var names []string
	for _, n := range Capabilities {
		if w.hidden[n] {
			names = append(names, n)
		}
	}
	return w.Device.Name() + " without " + strings.Join(names, ",")
}

// Unwrap returns the device whose capabilities w hides.
func (w *without) Unwrap() Device { return w.Device }

// hides reports whether an interface of type t would reveal a capability
// w hides: t is an interface with all of that capability's methods.
func (w *without) hides(t reflect.Type) bool {
	if t.Kind() != reflect.Interface {
		return false
	}
	if h, ok := w.answers.Load(t); ok {
		return h.(bool)
	}
	h := false
	for n := range w.hidden {
		if c := capabilityTypes[n]; c != nil && t.Implements(c) {
			h = true
			break
		}
	}
	w.answers.Store(t, h)
	return h
}

// As finds the first device in d's chain — d, then what its Unwrap
// returns, and so on — that is a T, as errors.As finds an error in a
// chain of wrapped ones. Use it instead of a type assertion wherever d
// may be a wrapper such as Without's: for an optional interface
// (HostMemory) or the concrete device (parallel's NCCL engine needs the
// *cuda.Device itself). A device that wraps another should implement
// Unwrap() Device.
//
// Hidden capabilities stay hidden: As does not look through a Without
// for an interface that includes a capability the Without hides (the
// package-level functions, Softmax or AttentionOf, are how a caller
// reaches a capability). A concrete type is found: it is the device
// itself, which its owner asked for by name.
func As[T any](d Device) (T, bool) {
	t := reflect.TypeFor[T]()
	for d != nil {
		if v, ok := d.(T); ok {
			return v, true
		}
		if w, ok := d.(*without); ok && w.hides(t) {
			break
		}
		u, ok := d.(interface{ Unwrap() Device })
		if !ok {
			break
		}
		d = u.Unwrap()
	}
	var zero T
	return zero, false
}

// capable returns d's implementation of capability name, or nil. It
// looks through Without's wrapper only, and only for a capability the
// wrapper does not hide (never through another Unwrap, and never with
// As: a hidden capability must not be found through Unwrap).
func capable(d Device, name string) Device {
	if w, ok := d.(*without); ok {
		if w.hidden[name] {
			return nil
		}
		return w.Device
	}
	return d
}

// Softmax runs d's softmax kernel, or its composition from core kernels.
func Softmax(d Device, dst, src View, log bool) {
	if k, ok := capable(d, CapSoftmax).(SoftmaxKernels); ok {
		k.Softmax(dst, src, log)
		return
	}
	composedSoftmax(d, dst, src, log)
}

// SoftmaxBackward runs d's softmax backward kernel, or its composition.
func SoftmaxBackward(d Device, dx, y, dy View, log bool) {
	if k, ok := capable(d, CapSoftmax).(SoftmaxKernels); ok {
		k.SoftmaxBackward(dx, y, dy, log)
		return
	}
	composedSoftmaxBackward(d, dx, y, dy, log)
}

// LayerNorm runs d's layer-norm kernel, or its composition (which
// writes xc, when it is not the zero View, with Copy).
func LayerNorm(d Device, y, xc, mean, rstd, x, gamma, beta View, eps float64) {
	if k, ok := capable(d, CapLayerNorm).(LayerNormKernels); ok {
		k.LayerNorm(y, xc, mean, rstd, x, gamma, beta, eps)
		return
	}
	composedLayerNorm(d, y, mean, rstd, x, gamma, beta, eps)
	if xc.DType != Invalid {
		d.Copy(xc, x)
	}
}

// LayerNormBackward runs d's layer-norm backward kernel, or its
// composition.
func LayerNormBackward(d Device, dx, dgamma, dbeta, dy, x, mean, rstd, gamma View) {
	if k, ok := capable(d, CapLayerNorm).(LayerNormKernels); ok {
		k.LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma)
		return
	}
	composedLayerNormBackward(d, dx, dgamma, dbeta, dy, x, mean, rstd, gamma)
}

// CrossEntropy runs d's cross-entropy kernel, or its composition.
func CrossEntropy(d Device, loss, logits, targets View, ignore int, smoothing float64) {
	if k, ok := capable(d, CapCrossEntropy).(CrossEntropyKernels); ok {
		k.CrossEntropy(loss, logits, targets, ignore, smoothing)
		return
	}
	composedCrossEntropy(d, loss, logits, targets, View{}, false, ignore, smoothing)
}

// CrossEntropyBackward runs d's cross-entropy backward kernel, or its
// composition.
func CrossEntropyBackward(d Device, dlogits, logits, targets, dloss View, ignore int, smoothing float64) {
	if k, ok := capable(d, CapCrossEntropy).(CrossEntropyKernels); ok {
		k.CrossEntropyBackward(dlogits, logits, targets, dloss, ignore, smoothing)
		return
	}
	composedCrossEntropy(d, dlogits, logits, targets, dloss, true, ignore, smoothing)
}

// CausalFill runs d's causal-fill kernel, or MaskedFill with a mask made
// on the host.
func CausalFill(d Device, dst, src View, value float64) {
	if k, ok := capable(d, CapCausalFill).(CausalFiller); ok {
		k.CausalFill(dst, src, value)
		return
	}
	composedCausalFill(d, dst, src, value)
}

// AdamStep runs d's fused Adam update, or its composition.
func AdamStep(d Device, param, grad, m, v View, h AdamHyper) {
	if k, ok := capable(d, CapAdamStep).(AdamStepper); ok {
		k.AdamStep(param, grad, m, v, h)
		return
	}
	composedAdamStep(d, param, grad, m, v, h)
}

// AdamSteps runs AdamStep on each (params[i], grads[i], ms[i], vs[i])
// with one hyperparameter set: through d's group kernel where d has it
// and its per-tensor kernel (the group kernel is that arithmetic, so
// hiding adam_step hides both), otherwise one AdamStep per tensor. The
// slices must have one length and the tensors must not overlap.
func AdamSteps(d Device, params, grads, ms, vs []View, h AdamHyper) {
	if len(grads) != len(params) || len(ms) != len(params) || len(vs) != len(params) {
		panic(fmt.Sprintf("device: AdamSteps of %d parameters with %d gradients, %d and %d moments", len(params), len(grads), len(ms), len(vs)))
	}
	if k, ok := capable(d, CapAdamGroupStep).(AdamGroupStepper); ok && Has(d, CapAdamStep) {
		k.AdamSteps(params, grads, ms, vs, h)
		return
	}
	for i := range params {
		AdamStep(d, params[i], grads[i], ms[i], vs[i], h)
	}
}

// SGDStep runs d's fused SGD update, or its composition.
func SGDStep(d Device, param, grad, momentum View, h SGDHyper) {
	if k, ok := capable(d, CapSGDStep).(SGDStepper); ok {
		k.SGDStep(param, grad, momentum, h)
		return
	}
	composedSGDStep(d, param, grad, momentum, h)
}

// Adam8bitStep runs d's fused 8-bit Adam update, or the host composition
// of Adam8bitBlock (the same bits; no device temporaries).
func Adam8bitStep(d Device, param, grad, m, v, mScale, vScale View, h AdamHyper) {
	if k, ok := capable(d, CapAdam8bitStep).(Adam8bitStepper); ok {
		k.Adam8bitStep(param, grad, m, v, mScale, vScale, h)
		return
	}
	composedAdam8bitStep(d, param, grad, m, v, mScale, vScale, h)
}

// HostMemory is a capability of a device whose memory the host cannot
// address (CUDA): it hands out host memory that the device copies to and
// from fastest (page-locked, "pinned"). A CPU device built on it
// (cpu.HostMemory) holds state offloaded from the device (package
// offload), whose copies then need no staging.
type HostMemory interface {
	// AllocHost returns n bytes of such memory.
	AllocHost(n int) ([]byte, error)
	// FreeHost returns memory AllocHost gave.
	FreeHost(b []byte) error
}

// Storeless is implemented by a device that accounts memory but stores
// no values (the meta device, which plans): work that only makes values
// for it, on the host, can be skipped.
type Storeless interface{ Storeless() }

// StoresValues reports whether d keeps what is written to it (not a
// Storeless device, through any wrapper).
func StoresValues(d Device) bool {
	_, ok := As[Storeless](d)
	return !ok
}
