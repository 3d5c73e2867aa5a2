// Package infra holds the database stack's CloudFormation template; its test checks the template's shape.
package infra
