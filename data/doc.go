// Package data owns everything between files on disk and the batches a
// training step consumes: lazy datasets, the bounded-memory Loader and the
// host-side Batch that becomes device tensors under the Data category.
//
// # Datasets
//
// A Dataset has a length and returns example i on demand as an Image (a
// float tensor in channels-first order with a class label; a feature vector
// is a one-dimensional image) or a Window (Context tokens and the Context
// tokens that follow each of them). The file-backed datasets read one
// record per Get through io.ReaderAt and never hold a whole file in memory:
//
//   - IDX files, the MNIST / Fashion-MNIST format, plain or gzip-compressed
//     (OpenIDX, OpenIDXImages, FashionMNIST, MNIST). A compressed file is
//     decompressed once into a cache file named by the SHA-256 of its
//     content, written atomically, under the directory given by CacheDir,
//     else $MEMFIT_CACHE, else the user cache directory. A sidecar
//     (NAME.sum) records the copy's size and CRC-32C; every open checks
//     them and rebuilds a copy that is truncated, damaged or unrecorded.
//   - Token shards in llm.c's format (OpenShards): a header of 256
//     little-endian int32 (magic 20240520 and version 1 for uint16 tokens,
//     magic 20240801 and version 7 for uint32 tokens, then the token count)
//     followed by the tokens; many shards by glob.
//   - A byte corpus (OpenCorpus, Fortunes): every byte is a token.
//   - Fine-tuning records in JSON Lines or parquet (OpenRecords, OpenSFT):
//     text, prompt/completion, chat messages rendered by the model's
//     chat template (ChatTemplate), or Alpaca; tokenized once into a
//     cache file (once a day where the template renders the date with
//     strftime_now), with IgnoreIndex labels where nothing is trained, as
//     Sequences of their own length, packed into windows or padded per
//     batch.
//   - An image folder (OpenImageFolder): one subfolder per class, PNG and
//     JPEG decoded on demand, resized (bilinear) and normalised.
//   - Synthetic tasks computed from a seed, the defaults of the train
//     command: NewSpirals (a ten-class spiral in a few dozen dimensions, for
//     the MLP) and NewSyntheticText (a seeded toy language with words,
//     sums and copies, for GPT).
//
// Split, Normalize, RandomCrop and RandomFlip cover validation splits,
// normalisation and augmentation.
//
// # Loader
//
// A Loader batches a dataset with seeded shuffling that differs per epoch
// and does not depend on the number of workers, reads with N goroutines,
// keeps at most Prefetch batches ready beyond the one in use, delivers
// batches in order, stops on context cancellation and reports a failed
// record with its file and index. Its Position can be saved and restored
// with Seek, so a resumed run sees the same batches. Shuffling uses a
// keyed bijection of the index range rather than a stored permutation, so
// the loader's memory does not grow with the dataset. A batch the
// consumer is done with can be handed back (Batch.Recycle; the trainer
// does) so that its arrays serve a later batch: then the only host
// memory made per step is what Dataset.Get returns for each example.
//
// # Errors
//
// Everything here reads user input and returns errors; nothing panics on a
// bad file. Errors name the format, the file and the problem, and, for a
// record, its index: see Error.
//
// Batch.ToDevice copies a batch into tensors allocated under memory.Data;
// the caller releases them when the step is done.
package data
