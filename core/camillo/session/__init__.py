"""The unlocked vault's machinery, below the facade and the operations.

* :mod:`.core`: :class:`Session`, one per open vault (who acts, its keys, what was read, its device
  state and cache);
* :mod:`.keyring`: the master secret and epoch keys; :mod:`.reader`: reading the folder into the
  roster, the causal log and the materialised state; :mod:`.writer`: writing batches;
* :mod:`.unlock`: from a credential to a session; :mod:`.genesis`: creating a vault;
  :mod:`.installation`: this installation's device key; :mod:`.grantfile`: an agent's grant file.

Nothing here imports :mod:`camillo.ops` or the facade.  Confined to the thread that owns the vault.
"""

from .core import Session

__all__ = ["Session"]
