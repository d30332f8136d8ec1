package optim_test

import (
	"math"
	"strings"
	"testing"

	"github.com/memfit/memfit/optim"
)

func TestSchedules(t *testing.T) {
	cos := func(r float64) float64 { return 0.5 * (1 + math.Cos(math.Pi*r)) }
	cases := []struct {
		name  string
		s     optim.Schedule
		steps []int
		want  []float64
	}{
		{"constant", optim.Constant{}, []int{0, 1, 1000}, []float64{1, 1, 1}},
		{"warmup", optim.Warmup{Steps: 4}, []int{0, 1, 2, 3, 4, 100}, []float64{0.25, 0.5, 0.75, 1, 1, 1}},
		{"warmup-0", optim.Warmup{}, []int{0, 5}, []float64{1, 1}},
		{"cosine", optim.WarmupCosine{Total: 10}, []int{0, 5, 10, 11},
			[]float64{1, 0.5, 0, 0}},
		{"warmup-cosine", optim.WarmupCosine{Warmup: 10, Total: 110, Floor: 0.1},
			[]int{0, 4, 9, 10, 35, 60, 85, 109, 110, 1000},
			[]float64{0.1, 0.5, 1, 1, 0.1 + 0.9*cos(0.25), 0.55, 0.1 + 0.9*cos(0.75), 0.1 + 0.9*cos(0.99), 0.1, 0.1}},
		{"func", optim.ScheduleFunc(func(s int) float64 { return 1 / float64(s+1) }), []int{0, 1, 3}, []float64{1, 0.5, 0.25}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i, step := range c.steps {
				if got := c.s.Factor(step); math.Abs(got-c.want[i]) > 1e-12 {
					t.Errorf("Factor(%d) = %.15g, want %.15g", step, got, c.want[i])
				}
			}
		})
	}
}

func TestScheduleValidate(t *testing.T) {
	cases := []struct {
		s     optim.Schedule
		field string
	}{
		{optim.Warmup{Steps: -1}, "Warmup.Steps"},
		{optim.WarmupCosine{Warmup: -1, Total: 5}, "WarmupCosine.Warmup"},
		{optim.WarmupCosine{Warmup: 5, Total: 5}, "WarmupCosine.Total"},
		{optim.WarmupCosine{Total: 5, Floor: 1.5}, "WarmupCosine.Floor"},
		{optim.WarmupCosine{Total: 5, Floor: math.NaN()}, "WarmupCosine.Floor"},
	}
	opt, err := optim.NewSGD(nil, optim.SGD{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		err := opt.SetSchedule(c.s)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("SetSchedule(%+v) = %v, want an error naming %s", c.s, err, c.field)
		}
	}
}
