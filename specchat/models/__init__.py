"""Models a user gets (``specchat models pull``) or already has in other tools' stores."""
