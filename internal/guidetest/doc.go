// Package guidetest holds the test that follows docs/guide.md as a new
// grain author would, in a module of its own outside the tree. It has no
// code of its own; it may import only the test helpers under internal/.
package guidetest
