"""Capture: the source's binlog in, DC rows out. Data flows one way:
reader -> translate/decoder -> ordering -> sequencer -> writer -> checkpoint;
pipeline wires them for one channel and failover switches its source."""
