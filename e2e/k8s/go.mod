module pdpm.io/pdpm/e2e/k8s

go 1.24.0
