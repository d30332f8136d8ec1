package models

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// fieldError names the config struct and field that are wrong.
func fieldError(config, field, format string, args ...any) error {
	return fmt.Errorf("models: %s.%s %s", config, field, fmt.Sprintf(format, args...))
}

// checkPositive returns an error for the first field (name, value pairs)
// that is not > 0.
func checkPositive(config string, fields ...any) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if v := fields[i+1].(int); v <= 0 {
			return fieldError(config, fields[i].(string), "is %d, want > 0", v)
		}
	}
	return nil
}

func checkDropout(config string, p float64) error {
	if p < 0 || p >= 1 {
		return fieldError(config, "Dropout", "is %v, want 0 <= Dropout < 1", p)
	}
	return nil
}

func checkDType(config string, dt tensor.DType) error {
	if dt != device.Invalid && dt != tensor.F32 && dt != tensor.F64 && dt != tensor.BF16 {
		return fieldError(config, "DType", "is %v, want f32 (the default), f64 or bf16", dt)
	}
	return nil
}

func checkDevice(config string, dev device.Device) error {
	if dev == nil {
		return fmt.Errorf("models: %s: nil device", config)
	}
	return nil
}

// shapeError is the panic value of a Forward given an input it cannot use;
// tensor.Catch and tensor.Step return it as an error.
func shapeError(model, format string, args ...any) *tensor.Error {
	return &tensor.Error{Op: model, Msg: fmt.Sprintf(format, args...)}
}

// runBlocks routes blocks through the model's runner (RunSequential when
// none was set).
func runBlocks(runner nn.BlockRunner, r *nn.Run, blocks []nn.Module, x *tensor.Tensor) *tensor.Tensor {
	if runner == nil {
		runner = nn.RunSequential
	}
	return runner(r, blocks, x)
}

// parametersOf lists the parameters of modules in order.
func parametersOf(ms ...nn.Module) []*tensor.Tensor {
	var ps []*tensor.Tensor
	for _, m := range ms {
		ps = append(ps, m.Parameters()...)
	}
	return ps
}
