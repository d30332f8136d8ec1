package data_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/memfit/memfit/data"
)

func ExampleLoader() {
	ds, err := data.NewSpirals(data.SpiralsConfig{N: 1000, Seed: 1})
	if err != nil {
		panic(err)
	}
	train, val, _ := data.Split(ds, 0.2, 1)
	loader, err := data.NewLoader(train, data.LoaderConfig{Batch: 256, Shuffle: true, Seed: 1, Workers: 2, Prefetch: 2})
	if err != nil {
		panic(err)
	}
	fmt.Println("validation examples:", val.Len())
	for epoch := range 2 {
		for b, err := range loader.All(context.Background()) {
			if err != nil {
				panic(err)
			}
			fmt.Println("epoch", epoch, "batch", b.Index, b.InputShape, b.TargetShape)
		}
	}
	fmt.Printf("next: %+v\n", loader.Position())
	// Output:
	// validation examples: 200
	// epoch 0 batch 0 [256 32] [256]
	// epoch 0 batch 1 [256 32] [256]
	// epoch 0 batch 2 [256 32] [256]
	// epoch 0 batch 3 [32 32] [32]
	// epoch 1 batch 0 [256 32] [256]
	// epoch 1 batch 1 [256 32] [256]
	// epoch 1 batch 2 [256 32] [256]
	// epoch 1 batch 3 [32 32] [32]
	// next: {Epoch:2 Batch:0}
}

func ExampleLoader_Seek() {
	ds, _ := data.NewSyntheticText(data.SyntheticTextConfig{N: 64, Context: 16, Seed: 1})
	cfg := data.LoaderConfig{Batch: 8, Shuffle: true, Seed: 7, Workers: 2, Prefetch: 2}
	first, _ := data.NewLoader(ds, cfg)
	var saved data.Position
	for b, _ := range first.All(context.Background()) {
		if b.Index == 2 {
			saved = first.Position() // checkpoint after step 2
			fmt.Println("original batch 3 starts with index", nextIndices(first, saved)[0])
			break
		}
	}
	resumed, _ := data.NewLoader(ds, cfg)
	resumed.Seek(saved)
	for b, _ := range resumed.All(context.Background()) {
		fmt.Println("resumed at batch", b.Index, "starting with index", b.Indices[0])
		break
	}
	// Output:
	// original batch 3 starts with index 54
	// resumed at batch 3 starting with index 54
}

func nextIndices(l *data.Loader, p data.Position) []int {
	b, _ := l.Load(context.Background(), p.Epoch, p.Batch)
	return b.Indices
}

func ExampleOpenShards() {
	dir, _ := os.MkdirTemp("", "shards")
	defer os.RemoveAll(dir)
	for i, toks := range [][]int32{{10, 11, 12, 13, 14, 15, 16}, {20, 21, 22, 23, 24}} {
		var buf bytes.Buffer
		data.WriteShard(&buf, toks)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("train_%06d.bin", i)), buf.Bytes(), 0o644)
	}
	ds, err := data.OpenShards(filepath.Join(dir, "train_*.bin"), data.WindowOptions{Context: 3})
	if err != nil {
		panic(err)
	}
	defer ds.Close()
	for i := range ds.Len() {
		ex, _ := ds.Get(i)
		w := ex.(data.Window)
		fmt.Println(w.Input, "->", w.Target)
	}
	// Output:
	// [10 11 12] -> [11 12 13]
	// [13 14 15] -> [14 15 16]
	// [20 21 22] -> [21 22 23]
}

func ExampleOpenIDX() {
	_, err := data.OpenIDX("/no/such/train-images-idx3-ubyte")
	fmt.Println(err)
	// Output:
	// idx: /no/such/train-images-idx3-ubyte: no such file or directory
}

func ExampleNewSyntheticText() {
	ds, _ := data.NewSyntheticText(data.SyntheticTextConfig{Context: 48, Seed: 1})
	fmt.Printf("%q\n", ds.Text(0))
	fmt.Printf("%q\n", ds.Text(1))
	// Output:
	// ". node fenivi kibos kevan da. 5+7=12. nobuke maf "
	// "bww lybww. 6+2=8. pite takepo da. pi kevan zor ki"
}

func ExampleFashionMNIST() {
	train, err := data.FashionMNIST(data.FashionMNISTDir, true)
	if err != nil {
		fmt.Println("apt-get install dataset-fashion-mnist:", err)
		return
	}
	defer train.Close()
	ex, _ := train.Get(0)
	im := ex.(data.Image)
	fmt.Println(train.Len(), im.Shape, data.FashionMNISTClasses[im.Label])
}
