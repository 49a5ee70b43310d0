// placeholder replaced by the SDVG Live panel
