"""Money: the spend journal of an output directory, what it says was spent, and the replies it paid for."""
