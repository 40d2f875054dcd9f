package k8s

// PodTemplateSpec is the pod a Deployment or a Job makes: its labels
// (which a Deployment's selector must match) and its spec.
type PodTemplateSpec struct {
	ObjectMeta `json:"metadata,omitzero"`
	Spec       PodSpec        `json:"spec,omitzero"`
	Extra      map[string]any `json:"-"`
}

// AppendJSON appends t's JSON encoding to b.
func (t *PodTemplateSpec) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, t.Extra)
	if w.key("metadata") {
		w.object(t.ObjectMeta.AppendJSON(w.b))
	}
	if w.key("spec") {
		w.object(t.Spec.AppendJSON(w.b))
	}
	return w.close()
}

// RestartPolicy is a pod's restart policy.
type RestartPolicy string

// The restart policies. A Deployment's pods take Always only; a Job's take
// OnFailure or Never.
const (
	RestartPolicyAlways    RestartPolicy = "Always"
	RestartPolicyOnFailure RestartPolicy = "OnFailure"
	RestartPolicyNever     RestartPolicy = "Never"
)

// PodSpec is a pod's specification: at least one container.
type PodSpec struct {
	Containers         []Container            `json:"containers,omitempty"`
	InitContainers     []Container            `json:"initContainers,omitempty"`
	Volumes            []Volume               `json:"volumes,omitempty"`
	RestartPolicy      RestartPolicy          `json:"restartPolicy,omitempty"`
	ServiceAccountName string                 `json:"serviceAccountName,omitempty"`
	NodeSelector       map[string]string      `json:"nodeSelector,omitempty"`
	ImagePullSecrets   []LocalObjectReference `json:"imagePullSecrets,omitempty"`
	Extra              map[string]any         `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *PodSpec) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	list(&w, "containers", s.Containers)
	list(&w, "imagePullSecrets", s.ImagePullSecrets)
	list(&w, "initContainers", s.InitContainers)
	w.strMap("nodeSelector", s.NodeSelector)
	w.str("restartPolicy", string(s.RestartPolicy))
	w.str("serviceAccountName", s.ServiceAccountName)
	list(&w, "volumes", s.Volumes)
	return w.close()
}

// PullPolicy is a container's image pull policy.
type PullPolicy string

// The image pull policies.
const (
	PullAlways       PullPolicy = "Always"
	PullNever        PullPolicy = "Never"
	PullIfNotPresent PullPolicy = "IfNotPresent"
)

// Container is one container of a pod. Lifecycle hooks and the rarer
// fields go in Extra ("lifecycle", "stdin", ...).
type Container struct {
	Name            string               `json:"name,omitempty"`
	Image           string               `json:"image,omitempty"`
	Command         []string             `json:"command,omitempty"`
	Args            []string             `json:"args,omitempty"`
	WorkingDir      string               `json:"workingDir,omitempty"`
	Ports           []ContainerPort      `json:"ports,omitempty"`
	EnvFrom         []EnvFromSource      `json:"envFrom,omitempty"`
	Env             []EnvVar             `json:"env,omitempty"`
	Resources       ResourceRequirements `json:"resources,omitzero"`
	VolumeMounts    []VolumeMount        `json:"volumeMounts,omitempty"`
	LivenessProbe   *Probe               `json:"livenessProbe,omitempty"`
	ReadinessProbe  *Probe               `json:"readinessProbe,omitempty"`
	StartupProbe    *Probe               `json:"startupProbe,omitempty"`
	ImagePullPolicy PullPolicy           `json:"imagePullPolicy,omitempty"`
	SecurityContext *SecurityContext     `json:"securityContext,omitempty"`
	Extra           map[string]any       `json:"-"`
}

// AppendJSON appends c's JSON encoding to b.
func (c *Container) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, c.Extra)
	w.strs("args", c.Args)
	w.strs("command", c.Command)
	list(&w, "env", c.Env)
	list(&w, "envFrom", c.EnvFrom)
	w.str("image", c.Image)
	w.str("imagePullPolicy", string(c.ImagePullPolicy))
	if c.LivenessProbe != nil && w.key("livenessProbe") {
		w.value(c.LivenessProbe.AppendJSON(w.b))
	}
	w.str("name", c.Name)
	list(&w, "ports", c.Ports)
	if c.ReadinessProbe != nil && w.key("readinessProbe") {
		w.value(c.ReadinessProbe.AppendJSON(w.b))
	}
	if w.key("resources") {
		w.object(c.Resources.AppendJSON(w.b))
	}
	if c.SecurityContext != nil && w.key("securityContext") {
		w.value(c.SecurityContext.AppendJSON(w.b))
	}
	if c.StartupProbe != nil && w.key("startupProbe") {
		w.value(c.StartupProbe.AppendJSON(w.b))
	}
	list(&w, "volumeMounts", c.VolumeMounts)
	w.str("workingDir", c.WorkingDir)
	return w.close()
}

// Protocol is a port's protocol; the API's default is TCP.
type Protocol string

// The protocols of a port.
const (
	ProtocolTCP  Protocol = "TCP"
	ProtocolUDP  Protocol = "UDP"
	ProtocolSCTP Protocol = "SCTP"
)

// ContainerPort is a port a container listens on. Its Name (at most 15
// characters) lets a Service's TargetPort refer to it.
type ContainerPort struct {
	Name          string         `json:"name,omitempty"`
	ContainerPort int32          `json:"containerPort,omitempty"`
	Protocol      Protocol       `json:"protocol,omitempty"`
	Extra         map[string]any `json:"-"`
}

// AppendJSON appends p's JSON encoding to b.
func (p *ContainerPort) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, p.Extra)
	w.int32("containerPort", p.ContainerPort)
	w.str("name", p.Name)
	w.str("protocol", string(p.Protocol))
	return w.close()
}

// EnvVar is one environment variable: its Value, or a value taken from
// elsewhere (ValueFrom).
type EnvVar struct {
	Name      string         `json:"name,omitempty"`
	Value     string         `json:"value,omitempty"`
	ValueFrom *EnvVarSource  `json:"valueFrom,omitempty"`
	Extra     map[string]any `json:"-"`
}

// AppendJSON appends e's JSON encoding to b.
func (e *EnvVar) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, e.Extra)
	w.str("name", e.Name)
	w.str("value", e.Value)
	if e.ValueFrom != nil && w.key("valueFrom") {
		w.value(e.ValueFrom.AppendJSON(w.b))
	}
	return w.close()
}

// EnvVarSource is where an EnvVar's value comes from: one of a key of a
// ConfigMap or a Secret, or a field of the pod ("metadata.name",
// "status.podIP", ...). A container resource goes in Extra
// ("resourceFieldRef").
type EnvVarSource struct {
	ConfigMapKeyRef *ConfigMapKeySelector `json:"configMapKeyRef,omitempty"`
	SecretKeyRef    *SecretKeySelector    `json:"secretKeyRef,omitempty"`
	FieldRef        *ObjectFieldSelector  `json:"fieldRef,omitempty"`
	Extra           map[string]any        `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *EnvVarSource) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	if s.ConfigMapKeyRef != nil && w.key("configMapKeyRef") {
		w.value(s.ConfigMapKeyRef.AppendJSON(w.b))
	}
	if s.FieldRef != nil && w.key("fieldRef") {
		w.value(s.FieldRef.AppendJSON(w.b))
	}
	if s.SecretKeyRef != nil && w.key("secretKeyRef") {
		w.value(s.SecretKeyRef.AppendJSON(w.b))
	}
	return w.close()
}

// ConfigMapKeySelector is the key Key of the ConfigMap Name. The pod does
// not start while it is missing, unless Optional.
type ConfigMapKeySelector struct {
	Name     string         `json:"name,omitempty"`
	Key      string         `json:"key,omitempty"`
	Optional *bool          `json:"optional,omitempty"`
	Extra    map[string]any `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *ConfigMapKeySelector) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.str("key", s.Key)
	w.str("name", s.Name)
	w.boolPtr("optional", s.Optional)
	return w.close()
}

// SecretKeySelector is the key Key of the Secret Name. The pod does not
// start while it is missing, unless Optional.
type SecretKeySelector struct {
	Name     string         `json:"name,omitempty"`
	Key      string         `json:"key,omitempty"`
	Optional *bool          `json:"optional,omitempty"`
	Extra    map[string]any `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *SecretKeySelector) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.str("key", s.Key)
	w.str("name", s.Name)
	w.boolPtr("optional", s.Optional)
	return w.close()
}

// ObjectFieldSelector is a field of the pod, such as "metadata.namespace".
type ObjectFieldSelector struct {
	APIVersion string         `json:"apiVersion,omitempty"`
	FieldPath  string         `json:"fieldPath,omitempty"`
	Extra      map[string]any `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *ObjectFieldSelector) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.str("apiVersion", s.APIVersion)
	w.str("fieldPath", s.FieldPath)
	return w.close()
}

// EnvFromSource makes every key of a ConfigMap or a Secret an environment
// variable, its name prefixed with Prefix.
type EnvFromSource struct {
	Prefix       string              `json:"prefix,omitempty"`
	ConfigMapRef *ConfigMapEnvSource `json:"configMapRef,omitempty"`
	SecretRef    *SecretEnvSource    `json:"secretRef,omitempty"`
	Extra        map[string]any      `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *EnvFromSource) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	if s.ConfigMapRef != nil && w.key("configMapRef") {
		w.value(s.ConfigMapRef.AppendJSON(w.b))
	}
	w.str("prefix", s.Prefix)
	if s.SecretRef != nil && w.key("secretRef") {
		w.value(s.SecretRef.AppendJSON(w.b))
	}
	return w.close()
}

// ConfigMapEnvSource names the ConfigMap of an EnvFromSource.
type ConfigMapEnvSource struct {
	Name     string         `json:"name,omitempty"`
	Optional *bool          `json:"optional,omitempty"`
	Extra    map[string]any `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *ConfigMapEnvSource) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.str("name", s.Name)
	w.boolPtr("optional", s.Optional)
	return w.close()
}

// SecretEnvSource names the Secret of an EnvFromSource.
type SecretEnvSource struct {
	Name     string         `json:"name,omitempty"`
	Optional *bool          `json:"optional,omitempty"`
	Extra    map[string]any `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *SecretEnvSource) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.str("name", s.Name)
	w.boolPtr("optional", s.Optional)
	return w.close()
}

// VolumeMount mounts the pod's volume Name at MountPath in a container,
// or only its SubPath.
type VolumeMount struct {
	Name      string         `json:"name,omitempty"`
	MountPath string         `json:"mountPath,omitempty"`
	SubPath   string         `json:"subPath,omitempty"`
	ReadOnly  bool           `json:"readOnly,omitempty"`
	Extra     map[string]any `json:"-"`
}

// AppendJSON appends m's JSON encoding to b.
func (m *VolumeMount) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, m.Extra)
	w.str("mountPath", m.MountPath)
	w.str("name", m.Name)
	w.boolean("readOnly", m.ReadOnly)
	w.str("subPath", m.SubPath)
	return w.close()
}

// Volume is a pod's volume: Name and exactly one source. (k8s.io/api
// embeds the sources in a VolumeSource; they are fields here.) Other
// sources go in Extra ("hostPath", "projected", "csi", ...).
type Volume struct {
	Name                  string                             `json:"name,omitempty"`
	PersistentVolumeClaim *PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
	ConfigMap             *ConfigMapVolumeSource             `json:"configMap,omitempty"`
	Secret                *SecretVolumeSource                `json:"secret,omitempty"`
	EmptyDir              *EmptyDirVolumeSource              `json:"emptyDir,omitempty"`
	Extra                 map[string]any                     `json:"-"`
}

// AppendJSON appends v's JSON encoding to b.
func (v *Volume) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, v.Extra)
	if v.ConfigMap != nil && w.key("configMap") {
		w.value(v.ConfigMap.AppendJSON(w.b))
	}
	if v.EmptyDir != nil && w.key("emptyDir") {
		w.value(v.EmptyDir.AppendJSON(w.b))
	}
	w.str("name", v.Name)
	if v.PersistentVolumeClaim != nil && w.key("persistentVolumeClaim") {
		w.value(v.PersistentVolumeClaim.AppendJSON(w.b))
	}
	if v.Secret != nil && w.key("secret") {
		w.value(v.Secret.AppendJSON(w.b))
	}
	return w.close()
}

// PersistentVolumeClaimVolumeSource is a volume on the claim ClaimName.
type PersistentVolumeClaimVolumeSource struct {
	ClaimName string         `json:"claimName,omitempty"`
	ReadOnly  bool           `json:"readOnly,omitempty"`
	Extra     map[string]any `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *PersistentVolumeClaimVolumeSource) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.str("claimName", s.ClaimName)
	w.boolean("readOnly", s.ReadOnly)
	return w.close()
}

// ConfigMapVolumeSource is a volume of the ConfigMap Name's keys, one file
// each, or only those of Items.
type ConfigMapVolumeSource struct {
	Name        string         `json:"name,omitempty"`
	Items       []KeyToPath    `json:"items,omitempty"`
	DefaultMode *int32         `json:"defaultMode,omitempty"`
	Optional    *bool          `json:"optional,omitempty"`
	Extra       map[string]any `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *ConfigMapVolumeSource) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.int32Ptr("defaultMode", s.DefaultMode)
	w.items("items", s.Items)
	w.str("name", s.Name)
	w.boolPtr("optional", s.Optional)
	return w.close()
}

// SecretVolumeSource is a volume of the Secret SecretName's keys, one file
// each, or only those of Items. (The API names the Secret secretName.)
type SecretVolumeSource struct {
	SecretName  string         `json:"secretName,omitempty"`
	Items       []KeyToPath    `json:"items,omitempty"`
	DefaultMode *int32         `json:"defaultMode,omitempty"`
	Optional    *bool          `json:"optional,omitempty"`
	Extra       map[string]any `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *SecretVolumeSource) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.int32Ptr("defaultMode", s.DefaultMode)
	w.items("items", s.Items)
	w.boolPtr("optional", s.Optional)
	w.str("secretName", s.SecretName)
	return w.close()
}

// KeyToPath puts the key Key of a ConfigMap or a Secret at the relative
// Path of its volume.
type KeyToPath struct {
	Key   string         `json:"key,omitempty"`
	Path  string         `json:"path,omitempty"`
	Mode  *int32         `json:"mode,omitempty"`
	Extra map[string]any `json:"-"`
}

// AppendJSON appends k's JSON encoding to b.
func (k *KeyToPath) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, k.Extra)
	w.str("key", k.Key)
	w.int32Ptr("mode", k.Mode)
	w.str("path", k.Path)
	return w.close()
}

func (w *writer) items(k string, items []KeyToPath) {
	if len(items) == 0 || !w.key(k) {
		return
	}
	w.b = append(w.b, '[')
	for i := range items {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.value(items[i].AppendJSON(w.b))
	}
	w.b = append(w.b, ']')
}

// StorageMedium is the medium of an emptyDir volume.
type StorageMedium string

// The media of an emptyDir volume: the node's disk (the default) or memory.
const (
	StorageMediumDefault StorageMedium = ""
	StorageMediumMemory  StorageMedium = "Memory"
)

// EmptyDirVolumeSource is a volume that starts empty and lives as long as
// the pod. A non-nil &EmptyDirVolumeSource{} is written as emptyDir: {}.
type EmptyDirVolumeSource struct {
	Medium    StorageMedium  `json:"medium,omitempty"`
	SizeLimit string         `json:"sizeLimit,omitempty"`
	Extra     map[string]any `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *EmptyDirVolumeSource) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.str("medium", string(s.Medium))
	w.str("sizeLimit", s.SizeLimit)
	return w.close()
}
