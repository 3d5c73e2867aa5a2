// Package infra holds what operators deploy besides the functions: the database stack's
// CloudFormation template, and the node agent's systemd unit. Its tests check both.
package infra
