// Package house holds checks of the repository's own shape that no single
// package owns: today, that no function of the module grows past
// maxFuncLines lines, so each one stays readable in one screen.
package house
