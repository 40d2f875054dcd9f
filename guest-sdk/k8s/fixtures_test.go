package k8s

import "strconv"

// A scenario is the same children of one reconcile built two ways: as the
// nested maps a module writes without this package, and with its types.
// Both must encode to the same bytes.
type scenario struct {
	name        string
	maps, typed func(name string) []map[string]any
}

var scenarios = []scenario{
	{"backup", backupMaps, backupTyped},
	{"webapp", webappMaps, webappTyped},
	{"deployment", deploymentMaps, deploymentTyped},
}

var labels = map[string]string{"app.kubernetes.io/name": "shop", "app.kubernetes.io/managed-by": "wasmreconcile"}

func labelsAny() map[string]any {
	m := make(map[string]any, len(labels))
	for k, v := range labels {
		m[k] = v
	}
	return m
}

// backup: a ConfigMap holding a script and a CronJob that runs it against
// a claim, as a database backup module would.
func backupMaps(name string) []map[string]any {
	return []map[string]any{
		{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name + "-backup", "labels": labelsAny()},
			"data":     map[string]any{"backup.sh": "pg_dump -h $HOST > /backup/dump.sql", "RETENTION": "7"},
		},
		{
			"apiVersion": "batch/v1", "kind": "CronJob",
			"metadata": map[string]any{"name": name + "-backup", "labels": labelsAny()},
			"spec": map[string]any{
				"schedule":                   "0 3 * * *",
				"concurrencyPolicy":          "Forbid",
				"successfulJobsHistoryLimit": int32(3),
				"failedJobsHistoryLimit":     int32(1),
				"jobTemplate": map[string]any{
					"spec": map[string]any{
						"backoffLimit": int32(2),
						"template": map[string]any{
							"metadata": map[string]any{"labels": labelsAny()},
							"spec": map[string]any{
								"restartPolicy":      "OnFailure",
								"serviceAccountName": name + "-backup",
								"containers": []any{map[string]any{
									"name":    "backup",
									"image":   "postgres:17",
									"command": []any{"/bin/sh", "/scripts/backup.sh"},
									"env": []any{
										map[string]any{"name": "HOST", "value": name + "-db"},
										map[string]any{"name": "PGPASSWORD", "valueFrom": map[string]any{
											"secretKeyRef": map[string]any{"name": name + "-db", "key": "password"}}},
									},
									"resources": map[string]any{
										"requests": map[string]any{"cpu": "100m", "memory": "128Mi"},
										"limits":   map[string]any{"memory": "256Mi"},
									},
									"volumeMounts": []any{
										map[string]any{"name": "scripts", "mountPath": "/scripts"},
										map[string]any{"name": "data", "mountPath": "/backup"},
									},
								}},
								"volumes": []any{
									map[string]any{"name": "scripts", "configMap": map[string]any{"name": name + "-backup"}},
									map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": name + "-backup"}},
								},
							},
						},
					},
				},
			},
		},
	}
}

func backupTyped(name string) []map[string]any {
	meta := ObjectMeta{Name: name + "-backup", Labels: labels}
	cm := &ConfigMap{ObjectMeta: meta, Data: map[string]string{"backup.sh": "pg_dump -h $HOST > /backup/dump.sql", "RETENTION": "7"}}
	cj := &CronJob{ObjectMeta: meta, Spec: CronJobSpec{
		Schedule:                   "0 3 * * *",
		ConcurrencyPolicy:          ForbidConcurrent,
		SuccessfulJobsHistoryLimit: new(int32(3)),
		FailedJobsHistoryLimit:     new(int32(1)),
		JobTemplate: JobTemplateSpec{Spec: JobSpec{
			BackoffLimit: new(int32(2)),
			Template: PodTemplateSpec{
				ObjectMeta: ObjectMeta{Labels: labels},
				Spec: PodSpec{
					RestartPolicy:      RestartPolicyOnFailure,
					ServiceAccountName: name + "-backup",
					Containers: []Container{{
						Name:    "backup",
						Image:   "postgres:17",
						Command: []string{"/bin/sh", "/scripts/backup.sh"},
						Env: []EnvVar{
							{Name: "HOST", Value: name + "-db"},
							{Name: "PGPASSWORD", ValueFrom: &EnvVarSource{SecretKeyRef: &SecretKeySelector{Name: name + "-db", Key: "password"}}},
						},
						Resources: ResourceRequirements{
							Requests: ResourceList{ResourceCPU: "100m", ResourceMemory: "128Mi"},
							Limits:   ResourceList{ResourceMemory: "256Mi"},
						},
						VolumeMounts: []VolumeMount{{Name: "scripts", MountPath: "/scripts"}, {Name: "data", MountPath: "/backup"}},
					}},
					Volumes: []Volume{
						{Name: "scripts", ConfigMap: &ConfigMapVolumeSource{Name: name + "-backup"}},
						{Name: "data", PersistentVolumeClaim: &PersistentVolumeClaimVolumeSource{ClaimName: name + "-backup"}},
					},
				},
			},
		}},
	}}
	return []map[string]any{cm.Child(), cj.Child()}
}

// webapp: the children of modules/webapp, a ConfigMap and a Service.
func webappMaps(name string) []map[string]any {
	port := int64(8080)
	return []map[string]any{
		{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name + "-config", "labels": labelsAny()},
			"data":     map[string]any{"IMAGE": "nginx:1.27", "LOG_LEVEL": "debug"},
		},
		{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name, "labels": labelsAny()},
			"spec": map[string]any{
				"selector": map[string]any{"app.kubernetes.io/name": name},
				"ports":    []any{map[string]any{"name": "http", "port": port, "targetPort": port}},
			},
		},
	}
}

func webappTyped(name string) []map[string]any {
	port := int32(8080)
	cm := &ConfigMap{ObjectMeta: ObjectMeta{Name: name + "-config", Labels: labels},
		Data: map[string]string{"IMAGE": "nginx:1.27", "LOG_LEVEL": "debug"}}
	svc := &Service{ObjectMeta: ObjectMeta{Name: name, Labels: labels}, Spec: ServiceSpec{
		Selector: map[string]string{"app.kubernetes.io/name": name},
		Ports:    []ServicePort{{Name: "http", Port: port, TargetPort: FromInt32(port)}},
	}}
	return []map[string]any{cm.Child(), svc.Child()}
}

// deployment: a Deployment and its Service.
func deploymentMaps(name string) []map[string]any {
	sel := map[string]any{"app.kubernetes.io/name": name}
	return []map[string]any{
		{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": name, "labels": labelsAny()},
			"spec": map[string]any{
				"replicas": int32(3),
				"selector": map[string]any{"matchLabels": sel},
				"template": map[string]any{
					"metadata": map[string]any{"labels": labelsAny()},
					"spec": map[string]any{
						"containers": []any{map[string]any{
							"name":    "web",
							"image":   "nginx:1.27",
							"args":    []any{"--port", strconv.Itoa(8080)},
							"ports":   []any{map[string]any{"name": "http", "containerPort": int32(8080)}},
							"envFrom": []any{map[string]any{"configMapRef": map[string]any{"name": name + "-config"}}},
						}},
					},
				},
			},
		},
		{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name, "labels": labelsAny()},
			"spec": map[string]any{
				"selector": sel,
				"ports":    []any{map[string]any{"name": "http", "port": int32(80), "targetPort": "http"}},
			},
		},
	}
}

func deploymentTyped(name string) []map[string]any {
	sel := map[string]string{"app.kubernetes.io/name": name}
	d := &Deployment{ObjectMeta: ObjectMeta{Name: name, Labels: labels}, Spec: DeploymentSpec{
		Replicas: new(int32(3)),
		Selector: &LabelSelector{MatchLabels: sel},
		Template: PodTemplateSpec{ObjectMeta: ObjectMeta{Labels: labels}, Spec: PodSpec{
			Containers: []Container{{
				Name:    "web",
				Image:   "nginx:1.27",
				Args:    []string{"--port", strconv.Itoa(8080)},
				Ports:   []ContainerPort{{Name: "http", ContainerPort: 8080}},
				EnvFrom: []EnvFromSource{{ConfigMapRef: &ConfigMapEnvSource{Name: name + "-config"}}},
			}},
		}},
	}}
	svc := &Service{ObjectMeta: ObjectMeta{Name: name, Labels: labels}, Spec: ServiceSpec{
		Selector: sel,
		Ports:    []ServicePort{{Name: "http", Port: 80, TargetPort: FromString("http")}},
	}}
	return []map[string]any{d.Child(), svc.Child()}
}
