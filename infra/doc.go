// Package infra holds what operators deploy besides the functions: the database stack's and the
// access stack's CloudFormation templates, and the node agent's systemd unit. Its tests check
// all three.
package infra
