// Package regularfile opens the files a user names (model weights,
// configs, tokenizers, data, checkpoints) only when they are regular files,
// and says what they are otherwise.
//
// Opening a named pipe for reading blocks until a writer comes, and a
// device or a socket can stream without end, so every reader of a
// user-named path goes through Open or Read: they stat first, open without
// blocking where the system allows, and check the opened file again, in
// case something else was put in its place between the two. One
// description of file kinds (Describe) serves every message.
package regularfile
