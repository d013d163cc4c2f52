package auth

// Grant is one pattern of a user's grants and the permission it gives.
type Grant struct {
	Pattern string
	Perm    Perm
}

// Grants returns p's grants, in the order p checks them.
func (p *Principal) Grants() []Grant {
	out := make([]Grant, len(p.grants))
	for i, g := range p.grants {
		out[i] = Grant{Pattern: g.pattern, Perm: g.perm}
	}
	return out
}

// PermOn is the highest permission p holds on the counter id (Public:
// none).
func (p *Principal) PermOn(id string) Perm {
	for _, perm := range []Perm{Admin, Write, Read} {
		if p.Can(perm, id) {
			return perm
		}
	}
	return Public
}
